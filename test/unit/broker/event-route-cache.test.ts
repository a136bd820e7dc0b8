import { describe, expect, it } from 'vitest';
import { EventRouteCache, routesVersion, type Route } from '../../../src/broker/event-route-cache.js';

const route = (endpoint: string): Route => ({ endpoint, handler: 'audit', orderedTypes: [] });

describe('EventRouteCache', () => {
  describe('.validAt', () => {
    it('returns the routes stored at the same version', () => {
      const cache = new EventRouteCache();
      cache.store('1', new Map([['a.Happened', [route('billing')]]]));
      expect(cache.validAt('1', ['a.Happened', 'b.Happened'])).toEqual(
        new Map([['a.Happened', [route('billing')]]]),
      );
      expect(cache.uncached(['a.Happened', 'b.Happened'])).toEqual(['b.Happened']);
    });

    describe('when the version moved', () => {
      it('returns nothing, and the next store drops every route of the old version', () => {
        const cache = new EventRouteCache();
        cache.store(null, new Map([['a.Happened', [route('billing')]]]));
        expect(cache.validAt('1', ['a.Happened'])).toEqual(new Map());
        cache.store('1', new Map([['b.Happened', []]]));
        expect(cache.uncached(['a.Happened', 'b.Happened'])).toEqual(['a.Happened']);
        expect(cache.validAt('1', ['b.Happened'])).toEqual(new Map([['b.Happened', []]]));
      });
    });
  });

  describe('routesVersion', () => {
    it('differs for the same registration count under another stamp, and is null while neither exists', () => {
      expect(routesVersion('a', '1')).not.toBe(routesVersion('b', '1'));
      expect(routesVersion(null, '1')).not.toBe(routesVersion('a', '1'));
      expect(routesVersion(null, null)).toBeNull();
    });
  });
});
