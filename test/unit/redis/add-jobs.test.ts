import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../../src/index.js';
import { addJobsChecked } from '../../../src/redis/add-jobs.js';

describe('addJobsChecked', () => {
  describe('when addBulk returns a negative id for one job', () => {
    it('adds that job again, and only that one', async () => {
      const calls: string[][] = [];
      const replies = [[{ id: 'a' }, { id: -5 }, { id: 'c' }], [{ id: 'b' }]];
      const retries: number[] = [];
      await addJobsChecked(
        'q',
        ['a', 'b', 'c'],
        (jobs) => {
          calls.push([...jobs]);
          return Promise.resolve(replies.shift() ?? []);
        },
        (n) => retries.push(n),
      );
      expect(calls).toEqual([['a', 'b', 'c'], ['b']]);
      expect(retries).toEqual([1]);
    });
  });

  describe('when a job keeps failing', () => {
    it('throws publish-failed after 3 tries naming the queue', async () => {
      let tries = 0;
      const error = await addJobsChecked(
        'cmd~x',
        ['a'],
        () => {
          tries++;
          return Promise.resolve([{ id: -7 }]);
        },
        () => undefined,
      ).catch((e: unknown) => e);
      expect(tries).toBe(3);
      expect(HarrierError.is(error) && error.code).toBe('publish-failed');
      expect((error as Error).message).toContain('cmd~x');
    });
  });
});
