import type { MessageProperties } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { MAX_ATTEMPT_HISTORY, type AttemptRecord } from '../../../src/broker/message-broker.js';
import { headersOf, readFacts, type CarriedFacts } from '../../../src/rabbitmq/message-headers.js';

const base: CarriedFacts = {
  messageId: 'm-1',
  kind: 'command',
  type: 'orders.PlaceOrder',
  partitionKey: 'order-1',
  ordered: true,
  failures: 2,
  ends: 1,
  history: [],
  pendingDeadLetter: undefined,
  replayOf: 'dl-1',
  notBefore: 1_700_000_000_000,
  token: 'Zm9vYmFy',
  whileQueued: true,
};

function propertiesWith(headers: Record<string, unknown>): MessageProperties {
  return { headers } as unknown as MessageProperties;
}

describe('headersOf and readFacts', () => {
  it('carry every fact through AMQP headers', () => {
    const history: AttemptRecord[] = [{ attempt: 1, at: 5, error: { name: 'Error', message: 'boom' } }];
    const facts = { ...base, history };

    const read = readFacts(propertiesWith(headersOf(facts)));

    expect(read).toEqual({ facts, dropped: [] });
  });

  it("add a quorum queue's x-delivery-count to the unsettled ends", () => {
    const read = readFacts(propertiesWith({ ...headersOf(base), 'x-delivery-count': 2 }));

    expect(read.facts.ends).toBe(3);
  });

  it('keep malformed headers out, naming them, and never throw', () => {
    const read = readFacts(
      propertiesWith({
        'x-harrier-kind': 'telegram',
        'x-harrier-failures': 'many',
        'x-harrier-history': '{not json',
        'x-harrier-pending': '{"reason":1}',
      }),
    );

    expect(read.facts).toMatchObject({
      kind: undefined,
      failures: 0,
      history: [],
      pendingDeadLetter: undefined,
    });
    expect([...read.dropped].sort()).toEqual(
      ['x-harrier-failures', 'x-harrier-history', 'x-harrier-kind', 'x-harrier-pending'].sort(),
    );
  });

  describe('when the history holds long stacks', () => {
    it('keeps the history header within 32 KiB, dropping the oldest stacks first', () => {
      const stack = 'ü'.repeat(4096);
      const history: AttemptRecord[] = Array.from({ length: MAX_ATTEMPT_HISTORY }, (_, i) => ({
        attempt: i + 1,
        at: i,
        error: { name: 'Error', message: `failure ${i + 1}`, stack },
      }));

      const headers = headersOf({ ...base, history });

      expect(Buffer.byteLength(headers['x-harrier-history'] ?? '')).toBeLessThanOrEqual(32 * 1024);
      const read = readFacts(propertiesWith(headers)).facts.history;
      expect(read.map((record) => record.error.message)).toEqual(
        history.map((record) => record.error.message),
      );
      expect(read.at(-1)?.error.stack).toBe(stack);
      expect(read[0]?.error.stack).toBeUndefined();
    });
  });

  it('drop a publish token or an empty id a delivery ledger would refuse, naming them', () => {
    const { facts, dropped } = readFacts({
      messageId: 'from-properties',
      headers: { 'x-harrier-id': '', 'x-harrier-token': 'not a token!' },
    } as unknown as MessageProperties);

    expect(facts.token).toBeUndefined();
    expect(facts.messageId).toBe('from-properties');
    expect(dropped).toEqual(expect.arrayContaining(['x-harrier-id', 'x-harrier-token']));
  });
});
