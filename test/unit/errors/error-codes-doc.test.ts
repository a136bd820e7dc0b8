import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { HARRIER_ERROR_CODES, HARRIER_ERROR_CODE_ALIASES } from '../../../src/index.js';

const page = new URL('../../../docs/errors.md', import.meta.url);

/** The codes in the first column of the page's tables: rows that start with `| \`code\``. */
function documentedCodes(markdown: string): string[] {
  return [...markdown.matchAll(/^\| `([a-z-]+)`/gm)].map((match) => match[1] ?? '');
}

describe('docs/errors.md', () => {
  it('has a row for every code and every former spelling, and for nothing else', async () => {
    const documented = documentedCodes(await readFile(page, 'utf8'));
    const expected = [...HARRIER_ERROR_CODES, ...Object.keys(HARRIER_ERROR_CODE_ALIASES)];
    expect([...documented].sort()).toEqual([...expected].sort());
  });
});
