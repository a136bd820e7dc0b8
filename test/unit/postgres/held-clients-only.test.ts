import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..', '..');
const folder = join(root, 'src', 'postgres');

/** Every .ts file below `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sources(join(dir, entry.name))
      : entry.name.endsWith('.ts')
        ? [join(dir, entry.name)]
        : [],
  );
}

describe('src/postgres', () => {
  // A client checked out with a bare pool.connect() has no 'error' listener while it is held: a
  // server that ends its session then (a restart, pg_terminate_backend) crashes the process with
  // an uncaught 57P01. holdClient listens for as long as the client is held (held-client.ts).
  it('checks clients out of a pool only through holdClient, never with a bare connect()', () => {
    const bare = sources(folder)
      .filter((file) => !file.endsWith('held-client.ts'))
      .flatMap((file) =>
        readFileSync(file, 'utf8')
          .split('\n')
          .map((line, index) => ({ line, at: `${relative(root, file)}:${String(index + 1)}` }))
          .filter(({ line }) => /\.connect\(\s*\)/.test(line) && !/^\s*(\*|\/\/)/.test(line))
          .map(({ at }) => at),
      );
    expect(bare).toEqual([]);
  });
});
