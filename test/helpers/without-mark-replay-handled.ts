import type { DeadLetterStore } from '../../src/dead-letters/dead-letter-store.js';

/**
 * `store` seen as a store written before `markReplayHandled` existed: every other method goes to it,
 * that one is absent (groups too, as such a store would lack it).
 */
export function withoutMarkReplayHandled(store: DeadLetterStore): DeadLetterStore {
  return {
    add: (record) => store.add(record),
    get: (id) => store.get(id),
    list: (filter, page) => store.list(filter, page),
    count: (filter) => store.count(filter),
    markReplayed: (id, replay) => store.markReplayed(id, replay),
    remove: (ids) => store.remove(ids),
    purge: (filter) => store.purge(filter),
    close: () => store.close(),
  };
}
