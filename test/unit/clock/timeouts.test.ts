import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/index.js';
import { Timeouts } from '../../../src/clock/timeouts.js';

/** A manual clock that counts the timers set on it. */
class CountingClock extends ManualClock {
  timersSet = 0;
  override setTimer(delayMs: number, callback: () => void): () => void {
    this.timersSet++;
    return super.setTimer(delayMs, callback);
  }
}

describe('Timeouts', () => {
  describe('.set', () => {
    describe('when time-outs of several lengths are pending', () => {
      it('runs each out at its own time, in order, with one clock timer at a time', () => {
        const clock = new CountingClock(0);
        const timeouts = new Timeouts(clock);
        const fired: string[] = [];
        timeouts.set(300, () => fired.push('a@300'));
        timeouts.set(100, () => fired.push('b@100'));
        clock.advance(50);
        timeouts.set(300, () => fired.push('c@350'));
        timeouts.set(100, () => fired.push('d@150'));

        clock.advance(100);
        expect(fired).toEqual(['b@100', 'd@150']);
        clock.advance(250);
        expect(fired).toEqual(['b@100', 'd@150', 'a@300', 'c@350']);
        expect(timeouts.pending).toBe(0);
        expect(clock.nextTimerAt()).toBeUndefined();
        // Armed for 300, moved to 100 by a shorter one, then re-armed after each run-out.
        expect(clock.timersSet).toBeLessThanOrEqual(5);
      });
    });

    describe('when many time-outs of one length are set', () => {
      it('keeps one clock timer for all of them', () => {
        const clock = new CountingClock(0);
        const timeouts = new Timeouts(clock);
        for (let i = 0; i < 1000; i++) timeouts.set(1000, () => undefined);
        expect(clock.timersSet).toBe(1);
        expect(timeouts.pending).toBe(1000);
      });
    });
  });

  describe('.clear', () => {
    describe('when the last pending time-out is cleared', () => {
      it('never calls it, and the timer left runs out once without arming another', () => {
        const clock = new ManualClock(0);
        const timeouts = new Timeouts(clock);
        let fired = 0;
        const first = timeouts.set(100, () => fired++);
        const second = timeouts.set(100, () => fired++);
        timeouts.clear(first);
        timeouts.clear(second);
        timeouts.clear(second);

        expect(timeouts.pending).toBe(0);
        clock.advance(1000);
        expect(fired).toBe(0);
        expect(clock.nextTimerAt()).toBeUndefined();
      });
    });

    describe('when calls set and clear their time-outs one after the other', () => {
      it('arms one clock timer for all of them, not one per call', () => {
        const clock = new CountingClock(0);
        const timeouts = new Timeouts(clock);
        let fired = 0;
        for (let i = 0; i < 1000; i++) {
          timeouts.clear(timeouts.set(1000, () => fired++));
          clock.advance(1);
        }
        const last = timeouts.set(1000, () => fired++);
        clock.advance(500);

        expect(clock.timersSet).toBe(2);
        expect(fired).toBe(0);
        clock.advance(1000);
        expect(fired).toBe(1);
        expect(last.at).toBe(2000);
      });
    });

    describe('when the oldest time-out is cleared', () => {
      it('runs out the next one at its own time', () => {
        const clock = new ManualClock(0);
        const timeouts = new Timeouts(clock);
        const fired: number[] = [];
        const first = timeouts.set(100, () => fired.push(clock.now()));
        clock.advance(40);
        timeouts.set(100, () => fired.push(clock.now()));
        timeouts.clear(first);

        clock.advance(200);
        expect(fired).toEqual([140]);
      });
    });
  });
});
