import { describe, expect, it } from 'vitest';
import { CommandRouteCache, parseCommandRoutes } from '../../../src/broker/command-route-cache.js';

/** An endpoint registration as `register()` writes it in the endpoints hash. */
const registration = (registeredAt: number, types: string[], orderedTypes: string[] = []): string =>
  JSON.stringify({ subscriptions: [{ handler: 'h', kind: 'command', types, orderedTypes }], registeredAt });

describe('parseCommandRoutes', () => {
  it('routes each command type to its endpoint, ordered when that endpoint lists it among its ordered types', () => {
    expect(
      parseCommandRoutes({
        shop: registration(1, ['shop.Place', 'shop.Note'], ['shop.Place']),
        audit: JSON.stringify({
          subscriptions: [
            { handler: 'a', kind: 'event', types: ['shop.Placed'], orderedTypes: ['shop.Placed'] },
          ],
          registeredAt: 1,
        }),
      }),
    ).toEqual(
      new Map([
        ['shop.Place', { endpoint: 'shop', ordered: true }],
        ['shop.Note', { endpoint: 'shop', ordered: false }],
      ]),
    );
  });

  describe('when two endpoints registered the same type', () => {
    it('routes it to the one that registered last, and by name between two at the same time', () => {
      const later = parseCommandRoutes({
        old: registration(1, ['shop.Place']),
        moved: registration(2, ['shop.Place']),
      });
      expect(later.get('shop.Place')?.endpoint).toBe('moved');
      const tie = { b: registration(5, ['shop.Place']), a: registration(5, ['shop.Place']) };
      expect(parseCommandRoutes(tie).get('shop.Place')?.endpoint).toBe('a');
    });
  });

  describe('when a registration is not JSON or has no subscriptions', () => {
    it('skips it', () => {
      expect(
        parseCommandRoutes({ broken: 'not json', empty: '{}', shop: registration(1, ['shop.Place']) }),
      ).toEqual(new Map([['shop.Place', { endpoint: 'shop', ordered: false }]]));
    });
  });
});

describe('CommandRouteCache', () => {
  describe('.routeOf', () => {
    it('gives the route learnt at the confirmed version, and nothing once the version moved', () => {
      const cache = new CommandRouteCache(1_000);
      cache.confirm('1', 0);
      cache.learn(new Map([['shop.Place', { endpoint: 'shop', ordered: true }]]));
      expect(cache.routeOf('shop.Place')).toEqual({ endpoint: 'shop', ordered: true });
      expect(cache.knows('shop.Place')).toBe(true);
      expect(cache.confirm('2', 10)).toBe(true);
      expect(cache.routeOf('shop.Place')).toBeUndefined();
      expect(cache.knows('shop.Place')).toBe(false);
    });
  });
});
