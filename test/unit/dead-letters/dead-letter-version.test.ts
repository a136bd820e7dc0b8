import { describe, expect, it } from 'vitest';
import { deadLetterVersion } from '../../../src/dead-letters/dead-letter-version.js';

describe('deadLetterVersion', () => {
  it.each([
    ['an envelope without ver', JSON.stringify({ v: 1, type: 't', payload: {} }), 1],
    ['an envelope with ver 3', JSON.stringify({ v: 1, type: 't', ver: 3, payload: {} }), 3],
    ['bytes that are not JSON', '{"v":1,', null],
    ['JSON that is not an object', '[1,2]', null],
    ['JSON null', 'null', null],
    ['a ver that is a string', JSON.stringify({ ver: '3' }), null],
    ['a ver of 0', JSON.stringify({ ver: 0 }), null],
    ['a fractional ver', JSON.stringify({ ver: 2.5 }), null],
  ])('reads %s as %s', (_case, envelope, expected) => {
    expect(deadLetterVersion(envelope)).toBe(expected);
  });
});
