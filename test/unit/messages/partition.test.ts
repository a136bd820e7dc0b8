import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../../src/index.js';
import { fnv1a64, partitionOf } from '../../../src/extend.js';

describe('fnv1a64', () => {
  it.each([
    ['', 0xcbf29ce484222325n],
    ['a', 0xaf63dc4c8601ec8cn],
    ['foobar', 0x85944171f73967e8n],
  ])('hashes %j to the published FNV-1a-64 test vector', (key, expected) => {
    expect(fnv1a64(key)).toBe(expected);
  });

  it('hashes the UTF-8 bytes, not UTF-16 code units', () => {
    // "é" is 0xC3 0xA9 in UTF-8: hash those two bytes by hand.
    let h = 0xcbf29ce484222325n;
    for (const b of [0xc3, 0xa9]) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
    expect(fnv1a64('é')).toBe(h);
  });
});

describe('partitionOf', () => {
  it('is the hash mod the partition count', () => {
    expect(partitionOf('foobar', 16)).toBe(Number(0x85944171f73967e8n % 16n));
    expect(partitionOf('order-42', 1)).toBe(0);
  });

  it('spreads keys over every partition', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 1000; i++) seen.add(partitionOf(`key-${i}`, 8));
    expect(seen.size).toBe(8);
  });

  it.each([0, 1025, 2.5])('refuses %s partitions with a HarrierError', (n) => {
    expect(() => partitionOf('k', n)).toThrow(HarrierError);
  });
});
