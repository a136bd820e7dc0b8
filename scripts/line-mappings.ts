/**
 * Source-map `mappings` that keep one segment per original line: what a stack trace and a line
 * breakpoint need, at a fifth of the size of the per-token mappings tsc writes.
 */

const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** A mapping with absolute positions (0-based), as the `mappings` string encodes them relatively. */
export interface Segment {
  /** Column in the generated line. */
  readonly column: number;
  /** Index into the map's `sources`. */
  readonly source: number;
  readonly originalLine: number;
  readonly originalColumn: number;
}

/** The base64 VLQ numbers of one segment. */
function decodeVlq(text: string): number[] {
  const values: number[] = [];
  let value = 0;
  let shift = 0;
  for (const char of text) {
    const digit = BASE64.indexOf(char);
    if (digit < 0) throw new Error(`Not a base64 VLQ digit in source-map mappings: ${JSON.stringify(char)}`);
    value += (digit & 31) << shift;
    if ((digit & 32) !== 0) {
      shift += 5;
    } else {
      values.push((value & 1) === 1 ? -(value >>> 1) : value >>> 1);
      value = 0;
      shift = 0;
    }
  }
  return values;
}

function encodeVlq(value: number): string {
  let rest = value < 0 ? (-value << 1) | 1 : value << 1;
  let text = '';
  do {
    const digit = rest & 31;
    rest >>>= 5;
    text += BASE64[rest > 0 ? digit | 32 : digit] ?? '';
  } while (rest > 0);
  return text;
}

/**
 * The segments of each generated line. Segments that map to no source are left out, and so are
 * names: neither takes part in finding an original line.
 */
export function decodeMappings(mappings: string): Segment[][] {
  let source = 0;
  let originalLine = 0;
  let originalColumn = 0;
  return mappings.split(';').map((line) => {
    let column = 0;
    const segments: Segment[] = [];
    for (const text of line.split(',')) {
      if (text === '') continue;
      const [columnDelta = 0, sourceDelta, lineDelta = 0, originalColumnDelta = 0] = decodeVlq(text);
      column += columnDelta;
      if (sourceDelta === undefined) continue;
      source += sourceDelta;
      originalLine += lineDelta;
      originalColumn += originalColumnDelta;
      segments.push({ column, source, originalLine, originalColumn });
    }
    return segments;
  });
}

/** The `mappings` string of `lines` (segments in ascending column order on each line). */
export function encodeMappings(lines: readonly (readonly Segment[])[]): string {
  let source = 0;
  let originalLine = 0;
  let originalColumn = 0;
  return lines
    .map((segments) => {
      let column = 0;
      return segments
        .map((segment) => {
          const text =
            encodeVlq(segment.column - column) +
            encodeVlq(segment.source - source) +
            encodeVlq(segment.originalLine - originalLine) +
            encodeVlq(segment.originalColumn - originalColumn);
          ({ column, source, originalLine, originalColumn } = segment);
          return text;
        })
        .join(',');
    })
    .join(';');
}

/**
 * Keeps, on each generated line, only the segments where the original line or source changes, so
 * every generated position still maps to its exact original line; its column becomes that of the
 * first token mapped to that line.
 */
export function lineMappings(mappings: string): string {
  return encodeMappings(
    decodeMappings(mappings).map((segments) =>
      segments.filter((segment, index) => {
        const previous = segments[index - 1];
        return (
          previous === undefined ||
          previous.originalLine !== segment.originalLine ||
          previous.source !== segment.source
        );
      }),
    ),
  );
}
