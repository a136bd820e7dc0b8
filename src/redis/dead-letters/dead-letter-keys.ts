import type { DeadLetterStatus } from '../../dead-letters/dead-letter-store.js';

/**
 * The keys of one dead-letter store, `<prefix>:dlq:...`, as commands and as Lua must spell them.
 *
 * @remarks
 * Each record is a hash under `record:<id>`; the sorted set `index` scores each id by an insertion
 * sequence (`seq`), so lists come in first-insertion order and an update keeps its place; the
 * failure-group aggregates live under `group:...` and `groups:...` (see GROUP_AGGREGATES_LUA).
 * ioredis adds its client's `keyPrefix` to the keys a command names but not to the keys a script
 * builds itself, so scripts take the `script…` spellings, which carry that prefix already.
 */
export class DeadLetterKeys {
  /** Start of every key of the store, for messages. */
  readonly keyspace: string;
  readonly index: string;
  readonly seq: string;
  /** The keyspace as Lua must spell it. */
  readonly scriptKeyspace: string;
  /** The record prefix as Lua must spell it. */
  readonly scriptRecordPrefix: string;
  readonly #recordPrefix: string;

  /**
   * @param prefix - The store's prefix option, checked already.
   * @param clientKeyPrefix - The `keyPrefix` of the ioredis client the store talks through.
   */
  constructor(prefix: string, clientKeyPrefix: string) {
    this.keyspace = `${prefix}:dlq:`;
    this.index = `${this.keyspace}index`;
    this.seq = `${this.keyspace}seq`;
    this.#recordPrefix = `${this.keyspace}record:`;
    this.scriptKeyspace = `${clientKeyPrefix}${this.keyspace}`;
    this.scriptRecordPrefix = `${this.scriptKeyspace}record:`;
  }

  /** The hash of the record `id`. */
  record(id: string): string {
    return `${this.#recordPrefix}${id}`;
  }

  /** The sorted set that scores each fingerprint with records of `status` (or of either) by its latest failure. */
  groups(status: DeadLetterStatus | 'any'): string {
    return `${this.keyspace}groups:${status}`;
  }
}
