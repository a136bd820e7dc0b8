import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const dist = join(import.meta.dirname, '..', '..', 'dist');

/** Runs `code` in a CommonJS `node -e`, with only PATH in the environment. */
function commonJs(code: string): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, ['-e', code], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '' },
    timeout: 20_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('the harrier CLI and dashboard under require()', () => {
  it('load from CommonJS: no top-level await in harrier/cli, harrier/dashboard or the bin', () => {
    // test/global-setup.ts builds dist/ before any test when it is missing or stale.
    expect(existsSync(join(dist, 'cli', 'bin.js'))).toBe(true);
    const loaded = commonJs(
      `const cli = require(${JSON.stringify(join(dist, 'cli', 'index.js'))});
       const dashboard = require(${JSON.stringify(join(dist, 'dashboard', 'index.js'))});
       console.log(typeof cli.run, typeof dashboard.createDashboard);`,
    );
    expect(loaded.stderr).not.toContain('ERR_REQUIRE_ASYNC_MODULE');
    expect(loaded.stdout).toBe('function function\n');
    // The bin runs the command line of the process: none here, so the help and exit 2.
    const bin = commonJs(`require(${JSON.stringify(join(dist, 'cli', 'bin.js'))});`);
    expect(bin.stderr).toContain('Usage: harrier <command>');
    expect(bin.status).toBe(2);
  });
});
