import { describe, expect, it } from 'vitest';
import { runExample, type Outcome } from '../helpers/run-example.js';

describe('examples/nestjs', () => {
  describe('when run with npx tsx examples/nestjs/main.ts', () => {
    it('places orders over HTTP, reads them back through the query, refuses a bad payload and closes', async () => {
      const outcome: Outcome = await runExample('examples/nestjs/main.ts', { timeoutMs: 60_000 });
      expect(outcome.stderr).toBe('');
      expect(outcome.code).toBe(0);
      const lines = outcome.stdout.trim().split('\n');
      expect(lines[0]).toMatch(/^Harrier NestJS example: http:\/\/127\.0\.0\.1:\d+, endpoint "shop"/);
      expect(
        lines.filter((line) => /^POST \/orders o-[12] -> 202 \{"messageId":"[0-9a-f-]{36}"\}$/.test(line)),
      ).toHaveLength(2);
      // The request-scoped Confirmation was given the message context of the event's delivery.
      expect(lines).toContainEqual(
        expect.stringMatching(
          /^GET \/orders\/o-1 -> \{"orderId":"o-1","total":25,"confirmedBy":"ConfirmOrder\/[0-9a-f]{8} \(attempt 1\)"\}$/,
        ),
      );
      expect(lines).toContainEqual(
        expect.stringMatching(/^GET \/orders\/o-2 -> \{"orderId":"o-2","total":12\.5,/),
      );
      expect(lines).toContainEqual(
        expect.stringMatching(
          /^POST \/orders o-3 with no items -> 400 Payload of "shop\.PlaceOrder" does not match its schema/,
        ),
      );
      expect(lines.at(-1)).toBe('Closed: the bus stopped after its in-flight handlers finished.');
    }, 90_000);
  });
});
