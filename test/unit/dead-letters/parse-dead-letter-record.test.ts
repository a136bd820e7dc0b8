import { describe, expect, it } from 'vitest';
import { buildDeadLetterRecord } from '../../../src/dead-letters/dead-letter-record.js';
import { parseDeadLetterRecord } from '../../../src/dead-letters/parse-dead-letter-record.js';

const record = buildDeadLetterRecord({
  body: '{"v":1}',
  facts: {
    messageId: 'm-1',
    kind: 'event',
    type: 'orders.OrderPlaced',
    endpoint: 'reports',
    handler: 'Totals',
    attempt: 3,
    history: [],
    partitionKey: undefined,
  },
  handler: 'Totals',
  reason: 'projection-failed',
  error: { name: 'Error', message: 'boom', stack: 'Error: boom\n    at x (/app/a.js:1:1)' },
  ordered: true,
  now: Date.UTC(2026, 0, 1),
  logPosition: { topic: 'orders', partition: 2, offset: 41 },
});

describe('parseDeadLetterRecord', () => {
  describe('when the value is a record as JSON', () => {
    it('returns the record, its event-log position included', () => {
      expect(parseDeadLetterRecord(JSON.parse(JSON.stringify(record)))).toEqual({ ok: true, record });
    });
  });

  describe('when the record was replayed and its replay handled', () => {
    it('keeps each replay with when it was handled', () => {
      const replayed = {
        ...record,
        status: 'replayed' as const,
        replays: [
          { at: 1, by: 'ops' },
          { at: 2, handledAt: 3 },
        ],
      };
      expect(parseDeadLetterRecord(JSON.parse(JSON.stringify(replayed)))).toEqual({
        ok: true,
        record: replayed,
      });
    });
  });

  describe('when fields are missing or of the wrong type', () => {
    it('names each one', () => {
      const result = parseDeadLetterRecord({
        ...record,
        id: '',
        ordered: 'yes',
        logPosition: { topic: 'o' },
      });
      expect(result.ok).toBe(false);
      const issues = result.ok ? [] : result.issues;
      expect(issues.map((i) => i.split(':')[0])).toEqual(
        expect.arrayContaining(['id', 'ordered', 'logPosition.partition', 'logPosition.offset']),
      );
    });
  });
});
