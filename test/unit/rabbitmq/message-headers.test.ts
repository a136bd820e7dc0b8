import type { MessageProperties } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { MAX_ATTEMPT_HISTORY, type AttemptRecord } from '../../../src/broker/message-broker.js';
import {
  headersOf,
  publishOptionsOf,
  readFacts,
  type CarriedFacts,
} from '../../../src/rabbitmq/message-headers.js';

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

/** A fresh command as `publish` sends it now: attempt 1, no ledger, not ordered. */
const fresh: CarriedFacts = {
  messageId: 'm-2',
  kind: 'command',
  type: 'orders.PlaceOrder',
  partitionKey: undefined,
  ordered: false,
  failures: 0,
  ends: 0,
  history: [],
  pendingDeadLetter: undefined,
  replayOf: undefined,
  notBefore: undefined,
  token: undefined,
  whileQueued: false,
};

function propertiesWith(headers: Record<string, unknown> | undefined): MessageProperties {
  return { headers } as unknown as MessageProperties;
}

/** The properties a receiver sees for a message published with `facts` (as amqplib delivers them). */
function delivered(facts: CarriedFacts): MessageProperties {
  const { messageId, type } = publishOptionsOf(facts);
  const headers = publishOptionsOf(facts).headers as Record<string, unknown> | undefined;
  return { messageId, type, headers: headers ?? {} } as unknown as MessageProperties;
}

/** The headers every message carried before, for the same facts (the form of the previous version). */
function previousForm(facts: CarriedFacts): Record<string, unknown> {
  return {
    ...headersOf(facts),
    ...(facts.messageId !== undefined ? { 'x-harrier-id': facts.messageId } : {}),
    ...(facts.kind !== undefined ? { 'x-harrier-kind': facts.kind } : {}),
    ...(facts.type !== undefined ? { 'x-harrier-type': facts.type } : {}),
  };
}

describe('headersOf and readFacts', () => {
  it('carry every fact through AMQP properties and headers', () => {
    const history: AttemptRecord[] = [{ attempt: 1, at: 5, error: { name: 'Error', message: 'boom' } }];
    const facts = { ...base, history };

    const read = readFacts(delivered(facts), 'command');

    expect(read).toEqual({ facts, dropped: [] });
  });

  describe('a message published now', () => {
    it('carries its id and type as AMQP properties and no header', () => {
      const options = publishOptionsOf(fresh, { timestamp: 1_700_000_000, mandatory: true });

      expect(options).toEqual({
        persistent: true,
        messageId: 'm-2',
        type: 'orders.PlaceOrder',
        timestamp: 1_700_000_000,
        mandatory: true,
      });
      expect(readFacts(delivered(fresh), 'command')).toEqual({ facts: fresh, dropped: [] });
    });

    it('carries only its publish token with a ledger', () => {
      expect(headersOf({ ...fresh, token: 'Zm9vYmFy' })).toEqual({ 'x-harrier-token': 'Zm9vYmFy' });
    });

    it("takes an event's kind from the queue it arrives in", () => {
      const event: CarriedFacts = { ...fresh, kind: 'event', type: 'orders.OrderPlaced' };

      expect(headersOf(event)).toEqual({ 'x-harrier-type': 'orders.OrderPlaced' });
      expect(readFacts(delivered(event), 'event').facts).toEqual(event);
    });

    it.each([
      ['an event', { ...fresh, kind: 'event', type: 'orders.OrderPlaced' }, 'event', undefined],
      ['an ordered command', { ...fresh, partitionKey: 'k', ordered: true }, 'command', undefined],
      ['a command', fresh, 'command', 'orders.PlaceOrder'],
    ] as const)(
      'is read with its type by a receiver of the previous version: %s',
      (_, facts, queueKind, queueType) => {
        const properties = delivered(facts);

        // The previous version's rule: the type from the x-harrier-type header, else the type of a
        // command type's queue (a subscription or partition queue has none).
        const headers = properties.headers as Record<string, unknown>;
        const header = headers['x-harrier-type'];
        const type = typeof header === 'string' ? header : queueType;

        expect(type).toBe(facts.type);
        expect(readFacts(properties, queueKind).facts.type).toBe(facts.type);
      },
    );

    it('keeps a query kind in its header (no queue holds only queries)', () => {
      const query: CarriedFacts = { ...fresh, kind: 'query' };

      expect(headersOf(query)).toEqual({ 'x-harrier-kind': 'query' });
      expect(readFacts(delivered(query), 'command').facts.kind).toBe('query');
    });

    it('keeps the type header of an ordered message, for receivers of the previous version', () => {
      const ordered: CarriedFacts = { ...fresh, partitionKey: 'order-1', ordered: true };

      expect(headersOf(ordered)).toEqual({
        'x-harrier-type': 'orders.PlaceOrder',
        'x-harrier-key': 'order-1',
        'x-harrier-ordered': '1',
      });
      expect(readFacts(delivered(ordered), 'command').facts).toEqual(ordered);
    });

    it('carries a type longer than an AMQP short string in its header', () => {
      const long: CarriedFacts = { ...fresh, type: `orders.${'é'.repeat(200)}` };

      const options = publishOptionsOf(long);

      expect(options.type).toBeUndefined();
      expect(headersOf(long)).toEqual({ 'x-harrier-type': long.type });
      expect(readFacts(delivered(long), 'command').facts.type).toBe(long.type);
    });
  });

  describe('a message queued by the previous version (facts in headers only)', () => {
    it('is read from its headers', () => {
      const history: AttemptRecord[] = [{ attempt: 1, at: 5, error: { name: 'Error', message: 'boom' } }];
      const facts = { ...base, history };

      expect(readFacts(propertiesWith(previousForm(facts)), 'event')).toEqual({ facts, dropped: [] });
      expect(readFacts(propertiesWith(previousForm(fresh)), 'command')).toEqual({
        facts: fresh,
        dropped: [],
      });
    });

    it('takes its headers over the properties', () => {
      const read = readFacts(
        {
          messageId: 'property-id',
          type: 'property.Type',
          headers: previousForm(fresh),
        } as unknown as MessageProperties,
        'event',
      );

      expect(read.facts).toMatchObject({ messageId: 'm-2', type: 'orders.PlaceOrder', kind: 'command' });
    });
  });

  it("read a message with neither properties nor headers as facts unknown, of its queue's kind", () => {
    expect(readFacts({ headers: {} } as unknown as MessageProperties, 'event').facts).toMatchObject({
      messageId: undefined,
      type: undefined,
      kind: 'event',
    });
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

      expect(Buffer.byteLength(headers?.['x-harrier-history'] ?? '')).toBeLessThanOrEqual(32 * 1024);
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
