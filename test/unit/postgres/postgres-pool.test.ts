import { describe, expect, it } from 'vitest';
import { isPostgresUnavailable } from '../../../src/postgres/postgres-pool.js';

const withCode = (code: string, message = `failed: ${code}`): Error =>
  Object.assign(new Error(message), { code });

describe('isPostgresUnavailable', () => {
  it.each(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EPIPE'])(
    'is true for the socket error %s',
    (code) => {
      expect(isPostgresUnavailable(withCode(code))).toBe(true);
    },
  );

  it.each(['EHOSTUNREACH', 'ENETUNREACH'])('is true for an unreachable host or network (%s)', (code) => {
    expect(isPostgresUnavailable(withCode(code, `connect ${code} 10.0.0.9:5432`))).toBe(true);
  });

  it.each(['57P01', '57P02', '57P03', '08000', '08001', '08003', '08006'])(
    'is true for the SQLSTATE %s of a server going away',
    (code) => {
      expect(isPostgresUnavailable(withCode(code))).toBe(true);
    },
  );

  it('is true for SQLSTATE 53300: the server has no connection slot left', () => {
    expect(isPostgresUnavailable(withCode('53300', 'sorry, too many clients already'))).toBe(true);
  });

  it('is true for a client whose connection was lost before the statement', () => {
    expect(
      isPostgresUnavailable(new Error('Client has encountered a connection error and is not queryable')),
    ).toBe(true);
    expect(isPostgresUnavailable(new Error('Connection terminated unexpectedly'))).toBe(true);
  });

  it.each([
    ['a cancelled statement (57014)', withCode('57014', 'canceling statement due to user request')],
    ['a unique violation (23505)', withCode('23505', 'duplicate key value')],
    ['a missing table (42P01)', withCode('42P01', 'relation "x" does not exist')],
    ['a value that is not an error', 'boom'],
  ])('is false for %s', (_, error) => {
    expect(isPostgresUnavailable(error)).toBe(false);
  });
});
