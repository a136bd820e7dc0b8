import { describe, expect, it } from 'vitest';
import { ReadyQueues } from '../../../src/rabbitmq/ready-queues.js';

/** Takes everything, in the order handed out. */
function takeAll<T>(ready: ReadyQueues<T>): T[] {
  const taken: T[] = [];
  for (let item = ready.shift(); item !== undefined; item = ready.shift()) taken.push(item);
  return taken;
}

describe('ReadyQueues', () => {
  it('takes the queues in turn, each in its own order, whatever how much each holds', () => {
    const ready = new ReadyQueues<string>();
    for (const item of ['p1', 'p2', 'p3', 'p4']) ready.push('partition', item);
    ready.push('unordered', 'u1');
    ready.push('unordered', 'u2');
    expect(ready.size).toBe(6);
    expect(takeAll(ready)).toEqual(['p1', 'u1', 'p2', 'u2', 'p3', 'p4']);
    expect(ready.size).toBe(0);
  });

  it('puts an item back first, in front of its queue', () => {
    const ready = new ReadyQueues<string>();
    ready.push('a', 'a1');
    ready.push('a', 'a2');
    ready.push('b', 'b1');
    expect(ready.shift()).toBe('a1');
    ready.unshift('a', 'a1');
    expect(takeAll(ready)).toEqual(['a1', 'b1', 'a2']);
  });

  it('removes an item, and drains the rest', () => {
    const ready = new ReadyQueues<string>();
    ready.push('a', 'a1');
    ready.push('b', 'b1');
    ready.push('b', 'b2');
    expect(ready.remove('b', 'b1')).toBe(true);
    expect(ready.remove('b', 'b1')).toBe(false);
    expect(ready.remove('c', 'c1')).toBe(false);
    expect(ready.size).toBe(2);
    expect(ready.drain()).toEqual(['a1', 'b2']);
    expect(ready.size).toBe(0);
    expect(ready.shift()).toBeUndefined();
  });

  it('takes out the items a predicate picks, keeping the others in turn', () => {
    const ready = new ReadyQueues<string>();
    for (const item of ['a1', 'a2', 'a3']) ready.push('a', item);
    ready.push('b', 'b1');
    expect(ready.takeWhere((item) => item === 'a2' || item === 'b1')).toEqual(['a2', 'b1']);
    expect(ready.size).toBe(2);
    expect(takeAll(ready)).toEqual(['a1', 'a3']);
  });
});
