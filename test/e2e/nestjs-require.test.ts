import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const entry = join(import.meta.dirname, '..', '..', 'dist', 'nestjs', 'index.js');

describe('harrier/nestjs under require()', () => {
  it('loads from CommonJS (no top-level await), as a Nest app compiled to CommonJS requires it', () => {
    // test/global-setup.ts builds dist/ before any test when it is missing or stale.
    const loaded = spawnSync(
      process.execPath,
      [
        '-e',
        `const nest = require(${JSON.stringify(entry)}); console.log(Object.keys(nest).sort().join(' '));`,
      ],
      { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' }, timeout: 20_000 },
    );
    expect(loaded.stderr).not.toContain('ERR_REQUIRE_ASYNC_MODULE');
    expect(loaded.stdout).toBe('HarrierModule InjectBus InjectMessageContext MessageBus nestLogger\n');
  });
});
