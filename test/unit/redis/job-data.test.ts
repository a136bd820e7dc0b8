import { describe, expect, it } from 'vitest';
import { readJobData } from '../../../src/redis/job-data.js';

const JOB_ID = '01a23dcd-d424-7000-be1e-c6ad189cc6a5';
const BODY = '{"v":1}';
const record = { attempt: 1, at: 1_000, error: { name: 'Error', message: 'boom' } };
const pending = {
  reason: 'handler-failed',
  attempt: 2,
  at: 2_000,
  error: { name: 'Error', message: 'boom' },
};

describe('readJobData', () => {
  describe('when the job has today’s shape', () => {
    it('takes the message id from the job id and the kind from the queue, with no facts dropped', () => {
      expect(readJobData({ b: BODY }, JOB_ID, 'command')).toEqual({
        body: BODY,
        messageId: JOB_ID,
        kind: 'command',
        partitionKey: undefined,
        ordered: false,
        attemptsMade: undefined,
        history: [],
        pendingDeadLetter: undefined,
        replayOf: undefined,
        dropped: [],
      });
    });

    it('reads every delivery fact a retried or replayed job carries', () => {
      expect(
        readJobData(
          {
            b: BODY,
            i: 'other-id',
            k: 'event',
            p: 'key-1',
            o: true,
            a: 2,
            h: [record],
            d: pending,
            r: 'dl-1',
          },
          JOB_ID,
          'command',
        ),
      ).toEqual({
        body: BODY,
        messageId: 'other-id',
        kind: 'event',
        partitionKey: 'key-1',
        ordered: true,
        attemptsMade: 2,
        history: [record],
        pendingDeadLetter: pending,
        replayOf: 'dl-1',
        dropped: [],
      });
    });
  });

  describe('when facts beside the envelope are malformed', () => {
    it('drops each unusable one, names it, and keeps the envelope', () => {
      const parsed = readJobData(
        { b: BODY, i: 7, k: 'saga', p: null, o: 'yes', a: -1, h: [record, 'junk'], d: { reason: 1 }, r: {} },
        JOB_ID,
        'event',
      );
      expect(parsed).toMatchObject({
        body: BODY,
        messageId: JOB_ID,
        kind: 'event',
        partitionKey: undefined,
        ordered: false,
        attemptsMade: undefined,
        history: [record],
        pendingDeadLetter: undefined,
        replayOf: undefined,
      });
      expect(parsed.dropped).toEqual(['i', 'k', 'p', 'o', 'a', 'r', 'h (1 entries)', 'd']);
    });
  });

  describe('when the job data is not Harrier’s', () => {
    it('hands the data on as the body, to be dead-lettered as malformed', () => {
      expect(readJobData({ payload: 1 }, JOB_ID, 'command')).toMatchObject({
        body: '{"payload":1}',
        messageId: JOB_ID,
        kind: undefined,
        dropped: [],
      });
      expect(readJobData('not json', '', 'command')).toMatchObject({
        body: 'not json',
        messageId: undefined,
      });
    });
  });
});
