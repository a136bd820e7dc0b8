import { beforeAll, describe, expect, it } from 'vitest';
import { runExample, type Outcome } from '../helpers/run-example.js';

describe('examples/orders', () => {
  describe('when run with npx tsx examples/orders/main.ts', () => {
    let outcome: Outcome;
    beforeAll(async () => {
      outcome = await runExample('examples/orders/main.ts');
    }, 30_000);

    it('exits with code 0', () => {
      expect(outcome.code, outcome.stdout + outcome.stderr).toBe(0);
    });

    it('prints a retry of ChargePayment and its success on the third attempt', () => {
      expect(outcome.stdout).toMatch(
        /retrying\s+ChargePayment\s+orders\.OrderPlaced\s+o-1002\s+attempt 1 failed/,
      );
      expect(outcome.stdout).toMatch(
        /retrying\s+ChargePayment\s+orders\.OrderPlaced\s+o-1002\s+attempt 2 failed/,
      );
      expect(outcome.stdout).toMatch(/handled\s+ChargePayment\s+orders\.OrderPlaced\s+o-1002\s+on attempt 3/);
    });

    it('prints a dead letter of NotifyLegacyCrm for each order, with its reason', () => {
      for (const orderId of ['o-1001', 'o-1002', 'o-1003']) {
        expect(outcome.stdout).toMatch(
          new RegExp(
            `dead-lettered\\s+NotifyLegacyCrm\\s+orders\\.OrderPlaced\\s+${orderId}\\s+handler-failed after 3 attempts`,
          ),
        );
      }
      expect(outcome.stdout).toContain('Dead letters (bus.deadLetters.list()): 3');
    });

    it('prints the summary of the 3 orders, each with its stock reserved and the two card orders paid', () => {
      expect(outcome.stdout).toContain('3 orders');
      for (const orderId of ['o-1001', 'o-1002']) {
        expect(outcome.stdout).toMatch(
          new RegExp(`^\\s+${orderId}\\s+\\w+\\s+\\d+\\s+\\$\\d+\\.\\d\\d\\s+res-\\d{4}\\s+pay-\\d{4}$`, 'm'),
        );
      }
      expect(outcome.stdout).toMatch(/^\s+o-1003\s+Linus\s+4\s+\$41\.70\s+res-\d{4}\s+-$/m);
    });

    describe('its order-fulfilment saga', () => {
      /** The timeline lines of one handler for one order. */
      const handledBy = (handler: string, orderId: string): string[] =>
        outcome.stdout
          .split('\n')
          .filter((line) => new RegExp(`\\shandled\\s+${handler}\\s+\\S+\\s+${orderId}\\b`).test(line));
      /** The milliseconds since start of the first timeline line that matches. */
      const at = (pattern: RegExp): number => {
        const line = outcome.stdout.split('\n').find((l) => pattern.test(l));
        return Number(/^\s*\+(\d+) ms/.exec(line ?? '')?.[1] ?? Number.NaN);
      };

      it('ships o-1001, paid before its stock was reserved (the warehouse was busy twice)', () => {
        expect(outcome.stdout).toMatch(
          /retrying\s+ReserveStockHandler\s+orders\.ReserveStock\s+o-1001\s+attempt 2 failed \(Warehouse system busy\)/,
        );
        expect(outcome.stdout).toContain('  order o-1001: paid, stock reserved -> ready to ship\n');
        expect(handledBy('ShipOrderHandler', 'o-1001')).toHaveLength(1);
      });

      it('ships o-1002, whose stock was reserved before the payment went through', () => {
        expect(outcome.stdout).toContain('  order o-1002: stock reserved, paid -> ready to ship\n');
        expect(handledBy('ShipOrderHandler', 'o-1002')).toHaveLength(1);
      });

      it('cancels o-1003, never paid, when its PaymentDue timeout fires 2 s after it was placed, and releases its stock', () => {
        expect(outcome.stdout).toContain(
          '  order o-1003: stock reserved, not paid in 2 s -> cancelled, stock released\n',
        );
        expect(handledBy('ReleaseStockHandler', 'o-1003')).toHaveLength(1);
        expect(handledBy('ShipOrderHandler', 'o-1003')).toEqual([]);
        const placed = at(/\ssent\s+bus\.send\s+orders\.PlaceOrder\s+o-1003\b/);
        const released = at(/\shandled\s+ReleaseStockHandler\s+orders\.ReleaseStock\s+o-1003\b/);
        expect(released - placed).toBeGreaterThanOrEqual(1_950);
      });

      it("takes each order's PaymentDue once, and releases the stock of no shipped order", () => {
        for (const orderId of ['o-1001', 'o-1002', 'o-1003']) {
          expect(
            handledBy('orders\\.Fulfilment', orderId).filter((line) => line.includes('orders.PaymentDue')),
          ).toHaveLength(1);
        }
        expect([
          ...handledBy('ReleaseStockHandler', 'o-1001'),
          ...handledBy('ReleaseStockHandler', 'o-1002'),
        ]).toEqual([]);
      });
    });

    it('reports no error or stack trace on stderr', () => {
      expect(outcome.stderr).not.toMatch(/"level":"(warn|error)"|\n\s+at /);
    });
  });
});
