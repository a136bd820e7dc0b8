import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock/manual-clock.js';

const START = Date.UTC(2026, 0, 1);

describe('ManualClock', () => {
  describe('constructor', () => {
    describe('when given no start time', () => {
      it('starts at 2026-01-01T00:00:00Z', () => {
        expect(new ManualClock().now()).toBe(START);
      });
    });
  });

  describe('.advance', () => {
    describe('when timers fall due', () => {
      it('fires them in order of due time, ties in the order they were set, each at its due time', () => {
        const clock = new ManualClock(START);
        const fired: [string, number][] = [];
        const timer = (name: string) => () => {
          fired.push([name, clock.now() - START]);
        };
        clock.setTimer(30, timer('c'));
        clock.setTimer(10, timer('a'));
        clock.setTimer(20, timer('b1'));
        clock.setTimer(20, timer('b2'));
        clock.setTimer(31, timer('late'));

        clock.advance(30);

        expect(fired).toEqual([
          ['a', 10],
          ['b1', 20],
          ['b2', 20],
          ['c', 30],
        ]);
        expect(clock.now()).toBe(START + 30);
      });

      it('fires a timer set by a callback in the same advance when it falls due within it', () => {
        const clock = new ManualClock(START);
        const fired: number[] = [];
        clock.setTimer(10, () => {
          clock.setTimer(5, () => fired.push(clock.now() - START));
        });

        clock.advance(15);

        expect(fired).toEqual([15]);
      });

      it('fires a timer with a zero or negative delay on the next advance', () => {
        const clock = new ManualClock(START);
        let fired = 0;
        clock.setTimer(0, () => fired++);
        clock.setTimer(-50, () => fired++);
        expect(fired).toBe(0);

        clock.advance(0);

        expect(fired).toBe(2);
      });

      it('fires each timer only once', () => {
        const clock = new ManualClock(START);
        let fired = 0;
        clock.setTimer(10, () => fired++);

        clock.advance(10);
        clock.advance(10);

        expect(fired).toBe(1);
      });
    });

    describe('when a timer was cancelled', () => {
      it('does not fire it and still fires the others', () => {
        const clock = new ManualClock(START);
        const fired: string[] = [];
        const cancel = clock.setTimer(10, () => fired.push('cancelled'));
        clock.setTimer(10, () => fired.push('kept'));

        cancel();
        clock.advance(100);

        expect(fired).toEqual(['kept']);
        expect(clock.nextTimerAt()).toBeUndefined();
      });

      it('ignores a cancel after the timer has fired', () => {
        const clock = new ManualClock(START);
        let fired = 0;
        const cancel = clock.setTimer(10, () => fired++);
        clock.advance(10);

        cancel();
        clock.advance(10);

        expect(fired).toBe(1);
      });
    });

    describe('when given a negative amount', () => {
      it('does not move time backwards', () => {
        const clock = new ManualClock(START);

        clock.advance(-1_000);

        expect(clock.now()).toBe(START);
      });
    });
  });

  describe('.advanceTo', () => {
    describe('when the time is earlier than now', () => {
      it('keeps the current time and fires nothing', () => {
        const clock = new ManualClock(START);
        clock.advance(100);
        let fired = 0;
        clock.setTimer(1, () => fired++);

        clock.advanceTo(START);

        expect(clock.now()).toBe(START + 100);
        expect(fired).toBe(0);
      });
    });

    describe('when the time is later than now', () => {
      it('moves to it, firing the timers due up to and including it', () => {
        const clock = new ManualClock(START);
        const fired: string[] = [];
        clock.setTimer(100, () => fired.push('due'));
        clock.setTimer(101, () => fired.push('not yet'));

        clock.advanceTo(START + 100);

        expect(clock.now()).toBe(START + 100);
        expect(fired).toEqual(['due']);
      });
    });
  });

  describe('.nextTimerAt', () => {
    describe('when timers are pending', () => {
      it('returns the earliest uncancelled due time', () => {
        const clock = new ManualClock(START);
        const cancel = clock.setTimer(5, () => undefined);
        clock.setTimer(20, () => undefined);
        clock.setTimer(10, () => undefined);
        cancel();

        expect(clock.nextTimerAt()).toBe(START + 10);
      });
    });
  });
});
