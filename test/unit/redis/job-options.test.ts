import { describe, expect, it } from 'vitest';
import type { OutgoingMessage } from '../../../src/extend.js';
import { jobOptionDefaults, jobOptions, KEEP_ATTEMPTS, toJobData } from '../../../src/redis/job-data.js';

const message = (fields: Partial<OutgoingMessage> = {}): OutgoingMessage => ({
  id: '01a23dcd-d424-7000-be1e-c6ad189cc6a5',
  kind: 'command',
  type: 'orders.PlaceOrder',
  body: '{"v":1}',
  ...fields,
});

const defaults = jobOptionDefaults({
  dedupeWindowMs: 60_000,
  failedRetentionMs: 1_500,
  failedRetentionCount: 7,
});

describe('jobOptions', () => {
  describe('when the message has no delivery time', () => {
    it('uses the message id as job id and deduplication id, with the retry and retention settings', () => {
      expect(jobOptions(message(), 1_000, defaults)).toEqual({
        jobId: message().id,
        deduplication: { id: message().id, ttl: 60_000 },
        attempts: KEEP_ATTEMPTS,
        backoff: { type: 'harrier' },
        removeOnComplete: true,
        removeOnFail: { age: 2, count: 7 },
      });
    });
  });

  describe("when the message's dedupe is 'while-queued'", () => {
    it('uses the message id as job id only, with no deduplication id', () => {
      const opts = jobOptions(message({ dedupe: 'while-queued' }), 1_000, defaults);
      expect(opts).toEqual({
        jobId: message().id,
        attempts: KEEP_ATTEMPTS,
        backoff: { type: 'harrier' },
        removeOnComplete: true,
        removeOnFail: { age: 2, count: 7 },
      });
      expect(opts).not.toHaveProperty('deduplication');
    });
  });

  describe("when the message's dedupe is 'window'", () => {
    it('sets the deduplication id as a message without dedupe gets it', () => {
      expect(jobOptions(message({ dedupe: 'window' }), 1_000, defaults).deduplication).toEqual({
        id: message().id,
        ttl: 60_000,
      });
    });
  });

  describe('when the message is delivered later', () => {
    it('delays it by the time left, and not at all once that time has passed', () => {
      expect(jobOptions(message({ deliverAt: 1_250 }), 1_000, defaults).delay).toBe(250);
      expect(jobOptions(message({ deliverAt: 1_000 }), 1_000, defaults)).not.toHaveProperty('delay');
      expect(jobOptions(message({ deliverAt: 900 }), 1_000, defaults)).not.toHaveProperty('delay');
    });
  });

  describe('when a broker publishes many jobs', () => {
    it('shares one frozen copy of the settings-only options between them', () => {
      const first = jobOptions(message(), 1_000, defaults);
      const second = jobOptions(message({ id: '01a23dcd-d424-7000-be1e-c6ad189cc6a6' }), 1_000, defaults);
      expect(first.backoff).toBe(second.backoff);
      expect(first.removeOnFail).toBe(second.removeOnFail);
      expect(Object.isFrozen(first.removeOnFail)).toBe(true);
      expect(first.deduplication).not.toBe(second.deduplication);
    });
  });
});

describe('toJobData', () => {
  describe('when the message has no partition key, order or replay', () => {
    it('carries the body only', () => {
      expect(toJobData(message())).toStrictEqual({ b: '{"v":1}' });
    });
  });

  describe('when it has them', () => {
    it('carries each one beside the body', () => {
      expect(toJobData(message({ partitionKey: 'k', ordered: true }), 'dl-1')).toStrictEqual({
        b: '{"v":1}',
        p: 'k',
        o: true,
        r: 'dl-1',
      });
    });
  });
});
