import { describe, expect, it } from 'vitest';
import type { CarriedFacts } from '../../../src/rabbitmq/message-headers.js';
import {
  excusedEnds,
  MAX_EXCUSED_ENDS,
  OUTAGE_WINDOW_MS,
  OutageReturns,
  REMEMBER_MS,
} from '../../../src/rabbitmq/outage-returns.js';

const Q = 'p.cmd.orders.Pay';
const T = 1_800_000_000_000;
/** A copy RabbitMQ delivered before, returned, without a publish token. */
const BACK = { token: undefined, redelivered: true };
const facts: CarriedFacts = {
  messageId: 'm-1',
  kind: 'command',
  type: 'orders.Pay',
  partitionKey: 'a-1',
  ordered: true,
  failures: 2,
  ends: 0,
  history: [],
  pendingDeadLetter: undefined,
  replayOf: undefined,
  notBefore: undefined,
  token: 'tok',
};

describe('OutageReturns', () => {
  it('excuses nothing for a copy it never lost', () => {
    expect(new OutageReturns().excuse(Q, 'm-1', 2, T, T + 10, BACK).excused).toBe(0);
  });

  it('excuses the whole rise of a copy back within the window: a restart may return it twice', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 2, T + 5_000, T + 6_000, BACK).excused).toBe(2);
  });

  it('excuses only the return the drop caused for a copy back after the window', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 1, 0, T);
    expect(returns.excuse(Q, 'm-1', 3, T + 1_000, T + 1_000 + OUTAGE_WINDOW_MS + 1, BACK).excused).toBe(1);
  });

  it('forgets a copy once it came back', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 1, T + 1, T + 2, BACK).excused).toBe(1);
    expect(returns.excuse(Q, 'm-1', 2, T + 3, T + 4, BACK).excused).toBe(0);
  });

  it('keeps the outage returns excused before across a second drop, and across a crash', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 1, 1, T);
    expect(returns.excuse(Q, 'm-1', 2, T + 1, T + 2, BACK).excused).toBe(2);
    returns.lose(Q, 'm-1', 2, 2, T + 3, false);
    expect(returns.excuse(Q, 'm-1', 3, T + 4, T + 5, BACK).excused).toBe(2);
  });

  it('excuses nothing after a crash of a copy with nothing excused before', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T, false);
    expect(returns.excuse(Q, 'm-1', 1, T + 1, T + 2, BACK).excused).toBe(0);
  });

  it('tells queues apart, and excuses nothing for a new copy (a lower count)', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 2, 0, T);
    expect(returns.excuse('p.evt.billing.h', 'm-1', 3, T + 1, T + 2, BACK).excused).toBe(0);
    expect(returns.excuse(Q, 'm-1', 0, T + 1, T + 2, BACK).excused).toBe(0);
  });

  it('excuses nothing for another copy of the message id, and keeps the lost copy for its return', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 0, T, T + 1, { token: undefined, redelivered: false }).excused).toBe(0);
    expect(returns.excuse(Q, 'm-1', 2, T, T + 2, BACK).excused).toBe(2);
  });

  it('excuses the return the drop caused when the copy comes back late (a long outage), up to REMEMBER_MS', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 1, T + REMEMBER_MS, T + REMEMBER_MS, BACK).excused).toBe(1);
  });

  it('forgets a copy lost more than REMEMBER_MS ago: its return counts', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T);
    expect(returns.excuse(Q, 'm-1', 1, T + REMEMBER_MS, T + REMEMBER_MS + 1, BACK).excused).toBe(0);
    returns.lose(Q, 'm-2', 0, 0, T);
    // A later loss sweeps the expired ones out.
    returns.lose(Q, 'm-3', 0, 0, T + REMEMBER_MS + 1);
    expect(returns.excuse(Q, 'm-2', 1, T, T + 1, BACK).excused).toBe(0);
  });

  it('excuses nothing for a copy with another publish token, and keeps the lost copy for its own', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T, true, { token: 'tok', facts });
    expect(returns.excuse(Q, 'm-1', 1, T, T + 1, { token: 'other', redelivered: true }).excused).toBe(0);
    expect(returns.excuse(Q, 'm-1', 1, T, T + 2, { token: 'tok', redelivered: true }).excused).toBe(1);
  });

  it('excuses at most MAX_EXCUSED_ENDS returns in all, and tells when outages explained more', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', MAX_EXCUSED_ENDS - 1, MAX_EXCUSED_ENDS - 1, T);
    expect(returns.excuse(Q, 'm-1', MAX_EXCUSED_ENDS, T, T + 1, BACK)).toMatchObject({
      excused: MAX_EXCUSED_ENDS,
      capped: false,
    });
    returns.lose(Q, 'm-1', MAX_EXCUSED_ENDS, MAX_EXCUSED_ENDS, T + 2);
    expect(returns.excuse(Q, 'm-1', MAX_EXCUSED_ENDS + 1, T, T + 3, BACK)).toMatchObject({
      excused: MAX_EXCUSED_ENDS,
      capped: true,
    });
  });

  it('gives back the facts a copy had when lost, for the same message returned with the same token', () => {
    const returns = new OutageReturns();
    returns.lose(Q, 'm-1', 0, 0, T, true, { token: 'tok', facts });
    expect(returns.excuse(Q, 'm-1', 1, T, T + 1, { token: 'tok', redelivered: true })).toEqual({
      excused: 1,
      capped: false,
      facts,
    });
    returns.lose(Q, 'm-1', 0, 0, T, true, { token: 'tok', facts });
    expect(
      returns.excuse(Q, 'm-1', 1, T, T + 1, { token: 'other', redelivered: true }).facts,
    ).toBeUndefined();
    returns.lose(Q, 'm-1', 0, 1, T, false, { token: 'tok', facts });
    expect(returns.excuse(Q, 'm-1', 1, T, T + 1, { token: 'tok', redelivered: true })).toEqual({
      excused: 1,
      capped: false,
      facts: undefined,
    });
  });
});

describe('excusedEnds', () => {
  const loss = { deliveryCount: 1, excusedEnds: 1, msAgo: 2_000, outage: true };

  it('excuses the whole rise within the window of the later of the loss and the channel opening', () => {
    expect(excusedEnds(loss, 3, 60_000)).toBe(3);
    expect(excusedEnds({ ...loss, msAgo: 60_000 }, 3, 1_000)).toBe(3);
  });

  it('excuses the one return the drop caused past the window, and the ends excused before', () => {
    expect(excusedEnds({ ...loss, msAgo: OUTAGE_WINDOW_MS + 1 }, 3, OUTAGE_WINDOW_MS + 1)).toBe(2);
  });

  it('excuses at most MAX_EXCUSED_ENDS', () => {
    expect(excusedEnds({ ...loss, excusedEnds: MAX_EXCUSED_ENDS }, 3, 0)).toBe(MAX_EXCUSED_ENDS);
    expect(excusedEnds({ ...loss, deliveryCount: 0, excusedEnds: 0 }, 10, 0)).toBe(MAX_EXCUSED_ENDS);
  });

  it('excuses only the ends excused before after a crash, and nothing for a new copy', () => {
    expect(excusedEnds({ ...loss, outage: false }, 3, 0)).toBe(1);
    expect(excusedEnds(loss, 0, 0)).toBe(0);
  });

  it('remembers at most 10,000 copies, forgetting the oldest first', () => {
    const returns = new OutageReturns();
    for (let i = 0; i <= 10_000; i++) returns.lose(Q, `m-${String(i)}`, 0, 0, T);
    expect(returns.excuse(Q, 'm-0', 1, T, T + 1, BACK).excused).toBe(0);
    expect(returns.excuse(Q, 'm-1', 1, T, T + 1, BACK).excused).toBe(1);
    expect(returns.excuse(Q, 'm-10000', 1, T, T + 1, BACK).excused).toBe(1);
  });
});
