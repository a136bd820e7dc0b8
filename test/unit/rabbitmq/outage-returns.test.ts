import { describe, expect, it } from 'vitest';
import { OUTAGE_WINDOW_MS, OutageReturns } from '../../../src/rabbitmq/outage-returns.js';

const Q = 'p.cmd.orders.Pay';
const T = 1_800_000_000_000;

describe('OutageReturns', () => {
  it('excuses nothing for a copy it never lost', () => {
    expect(new OutageReturns().excuse(Q, 'm-1', 2, T, T + 10)).toBe(0);
  });

  it('excuses the whole rise of a copy back within the window: a restart may return it twice', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 2, T + 5_000, T + 6_000)).toBe(2);
  });

  it('excuses only the return the drop caused for a copy back after the window', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 1, 0, T);
    expect(returns.excuse(Q, 'm-1', 3, T + 1_000, T + 1_000 + OUTAGE_WINDOW_MS + 1)).toBe(1);
  });

  it('forgets a copy once it came back', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 1, T + 1, T + 2)).toBe(1);
    expect(returns.excuse(Q, 'm-1', 2, T + 3, T + 4)).toBe(0);
  });

  it('keeps the outage returns excused before across a second drop, and across a crash', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 1, 1, T);
    expect(returns.excuse(Q, 'm-1', 2, T + 1, T + 2)).toBe(2);
    returns.lose(Q, 'm-1', 2, 2, T + 3, false);
    expect(returns.excuse(Q, 'm-1', 3, T + 4, T + 5)).toBe(2);
  });

  it('excuses nothing after a crash of a copy with nothing excused before', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T, false);
    expect(returns.excuse(Q, 'm-1', 1, T + 1, T + 2)).toBe(0);
  });

  it('tells queues apart, and excuses nothing for a new copy (a lower count)', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 2, 0, T);
    expect(returns.excuse('p.evt.billing.h', 'm-1', 3, T + 1, T + 2)).toBe(0);
    expect(returns.excuse(Q, 'm-1', 0, T + 1, T + 2)).toBe(0);
  });

  it('forgets a copy after 10 minutes', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 1, T + 1, T + 10 * 60_000 + 1)).toBe(0);
  });

  it('remembers at most 10,000 copies, forgetting the oldest first', () => {
    const returns = new OutageReturns();
    for (let i = 0; i <= 10_000; i++) returns.lose(Q, `m-${String(i)}`, 0, 0, T);
    expect(returns.excuse(Q, 'm-0', 1, T, T + 1)).toBe(0);
    expect(returns.excuse(Q, 'm-1', 1, T, T + 1)).toBe(1);
    expect(returns.excuse(Q, 'm-10000', 1, T, T + 1)).toBe(1);
  });
});
