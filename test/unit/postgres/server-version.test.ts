import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import { serverVersionError } from '../../../src/postgres/server-version.js';

describe('serverVersionError', () => {
  it.each([
    ['130000', '13.0'],
    ['150020', '15.20 (Debian 15.20-0+deb12u1)'],
    ['180001', '18.1'],
  ])('accepts server_version_num %s', (num, version) => {
    expect(serverVersionError(num, version)).toBeUndefined();
  });

  it.each([
    ['120022', '12.22'],
    ['110022', '11.22'],
    ['100023', '10.23'],
  ])(
    'refuses server_version_num %s with unsupported-server naming the version and the fix',
    (num, version) => {
      const error = serverVersionError(num, version);
      expect(HarrierError.is(error, 'unsupported-server')).toBe(true);
      expect(error?.message).toContain(`PostgreSQL ${version} is too old`);
      expect(error?.message).toContain('PostgreSQL 13 or later');
    },
  );
});
