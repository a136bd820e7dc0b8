import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ManualClock, WakeList, sleep } from '../../../src/clock/index.js';

describe('WakeList', () => {
  describe('.wait with a signal that has already aborted', () => {
    it('resolves at once', async () => {
      await expect(new WakeList().wait(AbortSignal.abort())).resolves.toBeUndefined();
    });
  });

  describe('.wakeAll', () => {
    it('resolves every pending wait', async () => {
      const list = new WakeList();
      const waits = [list.wait(), list.wait()];
      list.wakeAll();
      await expect(Promise.all(waits)).resolves.toEqual([undefined, undefined]);
    });
  });
});

describe('sleep', () => {
  it('resolves once the clock has advanced by ms', async () => {
    const clock = new ManualClock(0);
    let done = false;
    const slept = sleep(clock, 100).then(() => (done = true));
    clock.advance(99);
    expect(done).toBe(false);
    clock.advance(1);
    await slept;
    expect(done).toBe(true);
  });

  it('resolves when the signal aborts, and removes its listener either way', async () => {
    const clock = new ManualClock(0);
    const controller = new AbortController();
    const slept = sleep(clock, 60_000, controller.signal);
    controller.abort();
    await expect(slept).resolves.toBeUndefined();

    // A sleep that ends on its timer leaves no abort listener on a long-lived signal.
    const lane = new AbortController();
    for (let i = 0; i < 20; i++) {
      const timed = sleep(clock, 10, lane.signal);
      clock.advance(10);
      await timed;
    }
    expect(getEventListeners(lane.signal, 'abort')).toHaveLength(0);
  });
});
