import { SourceMap } from 'node:module';
import { describe, expect, it } from 'vitest';
import {
  decodeMappings,
  encodeMappings,
  lineMappings,
  type Segment,
} from '../../../scripts/line-mappings.js';

const at = (column: number, originalLine: number, originalColumn: number, source = 0): Segment => ({
  column,
  source,
  originalLine,
  originalColumn,
});

/** Generated line 0 maps tokens of original lines 0, 0, 0; line 1 maps lines 2, 2, 5, 5, 3 of two sources. */
const LINES: Segment[][] = [
  [at(0, 0, 0), at(7, 0, 7), at(12, 0, 12)],
  [at(2, 2, 4), at(9, 2, 11), at(15, 5, 2), at(20, 5, 9), at(30, 3, 0, 1)],
  [],
  [at(4, 1, 4, 1)],
];

/** The original (source, line) of every generated column up to 40 on each line of `mappings`. */
function originalLines(mappings: string): (string | undefined)[][] {
  const map = new SourceMap({
    version: 3,
    file: 'a.js',
    sourceRoot: '',
    sources: ['a.ts', 'b.ts'],
    sourcesContent: [],
    names: [],
    mappings,
  });
  return LINES.map((_, line) =>
    Array.from({ length: 40 }, (__, column) => {
      const entry = map.findEntry(line, column);
      return 'originalSource' in entry ? `${entry.originalSource}:${String(entry.originalLine)}` : undefined;
    }),
  );
}

describe('line-mappings', () => {
  describe('decodeMappings and encodeMappings', () => {
    it('give back the segments encoded, across lines and with positions that move back', () => {
      expect(decodeMappings(encodeMappings(LINES))).toEqual(LINES);
    });

    it('decode what tsc writes, leaving out segments without a source and names', () => {
      // A;AACA,IAAIA,CAAC: line 0 has an unmapped segment, line 1 one with a name (5 fields).
      expect(decodeMappings('A;AACA,IAAIA,CAAC')).toEqual([[], [at(0, 1, 0), at(4, 1, 4), at(5, 1, 5)]]);
    });

    it('refuses a character that is not base64', () => {
      expect(() => decodeMappings('AA!A')).toThrow('Not a base64 VLQ digit');
    });
  });

  describe('lineMappings', () => {
    it('keeps one segment per run of tokens of one original line and source', () => {
      expect(decodeMappings(lineMappings(encodeMappings(LINES)))).toEqual([
        [at(0, 0, 0)],
        [at(2, 2, 4), at(15, 5, 2), at(30, 3, 0, 1)],
        [],
        [at(4, 1, 4, 1)],
      ]);
    });

    it('maps every generated position to the same original line and source as the full mappings', () => {
      const full = encodeMappings(LINES);
      expect(originalLines(lineMappings(full))).toEqual(originalLines(full));
    });
  });
});
