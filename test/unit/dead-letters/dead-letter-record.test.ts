import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  MAX_ATTEMPT_HISTORY,
  type AttemptRecord,
  type DeliveryFacts,
  type ErrorInfo,
} from '../../../src/broker/message-broker.js';
import {
  buildDeadLetterRecord,
  deadLetterId,
  fingerprintOf,
} from '../../../src/dead-letters/dead-letter-record.js';
import type { DeadLetterInput } from '../../../src/dead-letters/dead-letter-record.js';

const T0 = Date.UTC(2026, 0, 1);

function errorAt(frames: readonly string[], name = 'TypeError', message = 'x is undefined'): ErrorInfo {
  return { name, message, stack: [`${name}: ${message}`, ...frames.map((f) => `    at ${f}`)].join('\n') };
}

const APP_FRAME = 'PlaceOrderHandler.execute (/srv/app/src/orders/place-order.ts:42:13)';
const OTHER_APP_FRAME = 'ChargeCardHandler.execute (/srv/app/src/billing/charge-card.ts:17:5)';
const LIB_FRAME = 'Object.parse (/srv/app/node_modules/some-lib/dist/index.js:10:3)';
const OTHER_LIB_FRAME = 'validate (/srv/app/node_modules/other-lib/lib/validate.js:99:1)';
const NODE_FRAME = 'process.processTicksAndRejections (node:internal/process/task_queues:95:5)';
const DISPATCH_FRAME = `Dispatcher.handle (${fileURLToPath(new URL('../../../src/dispatch/dispatcher.ts', import.meta.url))}:120:7)`;

describe('fingerprintOf', () => {
  describe('when the same error is thrown from the same place', () => {
    it('returns the same fingerprint, whatever the message', () => {
      const a = errorAt([APP_FRAME, NODE_FRAME], 'TypeError', 'order o-1 is undefined');
      const b = errorAt([APP_FRAME, NODE_FRAME], 'TypeError', 'order o-2 is undefined');
      expect(fingerprintOf(a)).toBe(fingerprintOf(b));
    });

    it('ignores line and column numbers', () => {
      const moved = APP_FRAME.replace(':42:13', ':57:9');
      expect(fingerprintOf(errorAt([moved]))).toBe(fingerprintOf(errorAt([APP_FRAME])));
    });
  });

  describe('when the first application frame differs', () => {
    it('returns a different fingerprint', () => {
      expect(fingerprintOf(errorAt([APP_FRAME]))).not.toBe(fingerprintOf(errorAt([OTHER_APP_FRAME])));
    });
  });

  describe('when the error name differs', () => {
    it('returns a different fingerprint', () => {
      expect(fingerprintOf(errorAt([APP_FRAME], 'TypeError'))).not.toBe(
        fingerprintOf(errorAt([APP_FRAME], 'RangeError')),
      );
    });
  });

  describe('when the stack starts in node_modules or Node internals', () => {
    it('skips those frames and uses the first application frame', () => {
      const direct = fingerprintOf(errorAt([APP_FRAME]));
      expect(fingerprintOf(errorAt([LIB_FRAME, NODE_FRAME, APP_FRAME]))).toBe(direct);
      expect(fingerprintOf(errorAt([OTHER_LIB_FRAME, DISPATCH_FRAME, APP_FRAME]))).toBe(direct);
    });
  });

  describe('when the error has no stack', () => {
    it('fingerprints by name alone, deterministically', () => {
      const a = fingerprintOf({ name: 'Error', message: 'a' });
      expect(fingerprintOf({ name: 'Error', message: 'b' })).toBe(a);
      expect(fingerprintOf({ name: 'TypeError', message: 'a' })).not.toBe(a);
      expect(a).toMatch(/^[0-9a-f]{12}$/);
    });
  });
});

describe('buildDeadLetterRecord', () => {
  const error = errorAt([APP_FRAME]);

  function input(attempt: number, overrides: Partial<DeliveryFacts> = {}): DeadLetterInput {
    const history: AttemptRecord[] = Array.from(
      { length: Math.min(attempt - 1, MAX_ATTEMPT_HISTORY) },
      (_, i) => {
        const n = attempt - Math.min(attempt - 1, MAX_ATTEMPT_HISTORY) + i;
        return { attempt: n, at: T0 + n * 1000, error };
      },
    );
    return {
      body: '{"v":1}',
      facts: {
        messageId: '01900000-0000-7000-8000-000000000001',
        kind: 'event',
        type: 'orders.OrderPlaced',
        endpoint: 'billing',
        handler: 'SendInvoice',
        attempt,
        history,
        partitionKey: 'o-1',
        ...overrides,
      },
      handler: 'SendInvoice',
      reason: 'handler-failed',
      error,
      ordered: true,
      now: T0 + attempt * 1000,
    };
  }

  describe('when the history is shorter than the bound', () => {
    it('appends the last failure to the history', () => {
      const record = buildDeadLetterRecord(input(3));
      expect(record.attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
      expect(record.attempts.at(-1)).toEqual({ attempt: 3, at: T0 + 3000, error });
      expect(record.attemptCount).toBe(3);
      expect(record.firstFailedAt).toBe(T0 + 1000);
      expect(record.lastFailedAt).toBe(T0 + 3000);
    });
  });

  describe(`when there are more than ${MAX_ATTEMPT_HISTORY} attempts`, () => {
    it(`keeps the newest ${MAX_ATTEMPT_HISTORY} and counts them all`, () => {
      const record = buildDeadLetterRecord(input(MAX_ATTEMPT_HISTORY + 5));
      expect(record.attempts).toHaveLength(MAX_ATTEMPT_HISTORY);
      expect(record.attempts.at(-1)?.attempt).toBe(MAX_ATTEMPT_HISTORY + 5);
      expect(record.attempts[0]?.attempt).toBe(6);
      expect(record.attemptCount).toBe(MAX_ATTEMPT_HISTORY + 5);
    });
  });

  describe('when built twice from the same delivery', () => {
    it('gives the same id, derived from endpoint, handler and message id', () => {
      const a = buildDeadLetterRecord(input(1));
      const b = buildDeadLetterRecord({ ...input(4), error: errorAt([OTHER_APP_FRAME]) });
      expect(a.id).toBe(b.id);
      expect(a.id).toBe(
        deadLetterId('billing', 'SendInvoice', '01900000-0000-7000-8000-000000000001', '{"v":1}'),
      );
    });
  });

  describe('when the subscription or message differs', () => {
    it('gives a different id', () => {
      const base = buildDeadLetterRecord(input(1)).id;
      expect(buildDeadLetterRecord(input(1, { handler: 'NotifyCustomer' })).id).not.toBe(base);
      expect(buildDeadLetterRecord(input(1, { endpoint: 'shipping' })).id).not.toBe(base);
      expect(
        buildDeadLetterRecord(input(1, { messageId: '01900000-0000-7000-8000-000000000002' })).id,
      ).not.toBe(base);
    });
  });

  describe('when the same job id arrives in two queues', () => {
    it('gives each queue its own id', () => {
      const command = (queue: string): DeadLetterInput => ({
        ...input(1, { messageId: '1', kind: undefined, type: undefined, handler: undefined, queue }),
        handler: undefined,
        reason: 'malformed',
      });
      expect(buildDeadLetterRecord(command('cmd~orders.PlaceOrder')).id).not.toBe(
        buildDeadLetterRecord(command('cmd~orders.CancelOrder')).id,
      );
    });
  });

  describe('when a command dies before and after routing', () => {
    it('gives the same id, so a replayed command that fails again updates its record', () => {
      const command = (handler: string | undefined, reason: DeadLetterInput['reason']): DeadLetterInput => ({
        ...input(1, { kind: 'command', type: 'orders.PlaceOrder', handler: undefined, queue: 'cmd~x' }),
        handler,
        reason,
      });
      expect(buildDeadLetterRecord(command('PlaceOrderHandler', 'handler-failed')).id).toBe(
        buildDeadLetterRecord(command(undefined, 'signature-invalid')).id,
      );
    });
  });

  describe('when the attempt history holds malformed entries', () => {
    it('keeps the well-formed ones and never throws', () => {
      const good: AttemptRecord = { attempt: 1, at: T0, error };
      const forged = [
        null,
        good,
        { attempt: 2, at: T0, error: { name: 'E', message: 'm', stack: 5 } },
        'x',
        { attempt: 'three', at: T0, error },
      ] as unknown as AttemptRecord[];
      const record = buildDeadLetterRecord(input(4, { history: forged }));
      expect(record.attempts).toEqual([
        good,
        { attempt: 2, at: T0, error: { name: 'E', message: 'm' } },
        { attempt: 4, at: T0 + 4000, error },
      ]);
    });
  });

  describe('when the message has no id', () => {
    it('derives the id from the body', () => {
      const a = buildDeadLetterRecord(input(1, { messageId: undefined }));
      expect(buildDeadLetterRecord(input(1, { messageId: undefined })).id).toBe(a.id);
      expect(buildDeadLetterRecord({ ...input(1, { messageId: undefined }), body: '{"v":2}' }).id).not.toBe(
        a.id,
      );
    });
  });

  it('copies the delivery facts and starts dead with no replays', () => {
    const record = buildDeadLetterRecord(input(2));
    expect(record).toMatchObject({
      messageId: '01900000-0000-7000-8000-000000000001',
      kind: 'event',
      type: 'orders.OrderPlaced',
      endpoint: 'billing',
      handler: 'SendInvoice',
      reason: 'handler-failed',
      envelope: '{"v":1}',
      partitionKey: 'o-1',
      ordered: true,
      fingerprint: fingerprintOf(error),
      status: 'dead',
      replays: [],
    });
  });
});
