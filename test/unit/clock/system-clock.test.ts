import { describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/clock/clock.js';

describe('systemClock', () => {
  describe('.setTimer', () => {
    describe('when a timer fires', () => {
      it('never runs the callback before now() reaches its due time', async () => {
        const early: number[] = [];
        const timers = Array.from(
          { length: 200 },
          (_, i) =>
            new Promise<void>((resolve) => {
              const dueAt = systemClock.now() + 1 + (i % 20);
              systemClock.setTimer(dueAt - systemClock.now(), () => {
                if (systemClock.now() < dueAt) early.push(dueAt - systemClock.now());
                resolve();
              });
            }),
        );

        await Promise.all(timers);

        expect(early).toEqual([]);
      });
    });

    describe('when a timer is cancelled', () => {
      it('does not run the callback', async () => {
        let fired = false;
        const cancel = systemClock.setTimer(5, () => {
          fired = true;
        });

        cancel();
        await new Promise<void>((resolve) => {
          systemClock.setTimer(30, resolve);
        });

        expect(fired).toBe(false);
      });
    });
  });
});
