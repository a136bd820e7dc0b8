import type { Cluster, Redis } from 'ioredis';
import { MAX_ATTEMPT_HISTORY, type AttemptRecord, type ErrorInfo } from '../broker/message-broker.js';
import {
  MAX_REPLAY_HISTORY,
  type DeadLetterFilter,
  type DeadLetterGroup,
  type DeadLetterGroupPage,
  type DeadLetterGroupPageOptions,
  type DeadLetterPage,
  type DeadLetterPageOptions,
  type DeadLetterRecord,
  type DeadLetterStatus,
  type DeadLetterStore,
  type LogPosition,
  type ReplayRecord,
} from '../dead-letters/dead-letter-store.js';
import {
  DeadLetterGroupAccumulator,
  decodeGroupCursor,
  encodeGroupCursor,
  groupPageLimit,
} from '../dead-letters/dead-letter-groups.js';
import {
  matchesDeadLetterFilter,
  selectsEveryDeadLetter,
} from '../dead-letters/matches-dead-letter-filter.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageKind } from '../messages/definition.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  redisScript,
  runCommand,
  type RedisConnection,
  type RedisErrorContext,
  type RedisScript,
} from './redis-support.js';
import type { RedisConnectionOptions } from './redis-connection.js';

/** Options of {@link RedisDeadLetterStore}. */
export interface RedisDeadLetterStoreOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` (or `rediss://`) URL, an
   * ioredis client to share (a `Redis`, or a `Cluster` for Redis Cluster), `{ cluster: nodes }`, or
   * ioredis options. Every key carries the prefix's hash tag, so on a cluster all share one slot.
   *
   * @remarks
   * The store creates, and on {@link RedisDeadLetterStore.close} quits, a client for a URL (or seed nodes, or options). A client
   * passed in stays the caller's: the store never quits it, never adds listeners to it, and its own
   * retry settings apply instead of `maxRetriesPerRequest` and `connectTimeoutMs` below.
   *
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the store writes; its keys are `<prefix>:dlq:...`.
   *
   * @remarks
   * The braces make it a Redis Cluster hash tag, so every key of the store lands in one slot and its
   * Lua scripts, which reach records by id, stay valid behind a cluster-aware proxy. Stores sharing a
   * prefix share their dead letters.
   *
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * Most records kept; when a new record would exceed it, the oldest by first insertion is dropped.
   * @defaultValue 100000
   */
  readonly maxRecords?: number;
  /**
   * For a client the store creates: how many reconnect attempts a command waits through before it
   * fails with `redis-unavailable`; `null` waits for as long as Redis is down.
   *
   * @remarks
   * One keeps the `harrier dlq` CLI quick to report a Redis that is down (well under a second for a
   * refused connection), while a long-running worker rides out a brief blip: its client keeps
   * reconnecting in the background whatever this says, so the first command after Redis is back
   * succeeds, and a dead-lettering that failed meanwhile is retried by the broker. The offline queue
   * stays on, because without it every command sent before the first connect completes would fail.
   *
   * @defaultValue 1
   */
  readonly maxRetriesPerRequest?: number | null;
  /**
   * For a client the store creates: how long one connection attempt may take before it counts as
   * failed, in ms.
   *
   * @remarks
   * Bounds how long a command waits when Redis's host drops packets instead of refusing them: at most
   * about `(maxRetriesPerRequest + 1) * connectTimeoutMs`. A healthy Redis connects in milliseconds.
   *
   * @defaultValue 3000
   */
  readonly connectTimeoutMs?: number;
}

const DEFAULT_MAX_RECORDS = 100_000;
const DEFAULT_PAGE_LIMIT = 100;
/** Index entries read per round trip while listing, counting or purging. */
const SCAN_CHUNK = 200;
/** Index entries read per round trip by a text search, which returns only the likely matches. */
const TEXT_SCAN_CHUNK = 1000;
/** Most records one page of a text search reads before it returns what it found and a cursor. */
const TEXT_SCAN_BUDGET = 10_000;
/** Ids per atomic batch in `remove`, so one script never blocks Redis for long. */
const REMOVE_BATCH = 500;
/** Stacks are capped at 4 KiB by `toErrorInfo`; enforced again on write. */
const MAX_STACK_CHARS = 4096;
const CURSOR_PREFIX = 'rdl1:';

/**
 * A record is a hash: `data` (the JSON of every field an update replaces), `first` (firstFailedAt),
 * `status`, `replays` (newline-separated JSON entries, oldest first: JSON never holds a raw newline,
 * so scripts can append and trim without a JSON library that would round numbers) and `v`, a version
 * bumped by every write so a purge never deletes a record changed after it was read.
 */
const RECORD_FIELDS = ['data', 'first', 'status', 'replays', 'v'] as const;

/**
 * Lua shared by every script that writes records: the failure-group aggregates. `K` is the keyspace
 * as Lua spells it. Per fingerprint and status (`dead`, `replayed`) two sorted sets hold the ids of
 * its records, scored by lastFailedAt (`group:<status>:last:<fp>`) and firstFailedAt
 * (`group:<status>:first:<fp>`); `groups:<dead|replayed|any>` score each fingerprint by its latest
 * lastFailedAt; `group:sample:<fp>` holds the fields shown for the group; `grouped` counts the
 * records the aggregates hold, so a reader can tell whether records written before them exist.
 */
const GROUP_LUA = `
local function gkey(K, status, side, fp) return K .. 'group:' .. status .. ':' .. side .. ':' .. fp end
local function refreshGroup(K, fp)
  local best = nil
  for _, status in ipairs({'dead', 'replayed'}) do
    local top = redis.call('ZRANGE', gkey(K, status, 'last', fp), -1, -1, 'WITHSCORES')
    if top[2] then
      redis.call('ZADD', K .. 'groups:' .. status, top[2], fp)
      if best == nil or tonumber(top[2]) > tonumber(best) then best = top[2] end
    else
      redis.call('ZREM', K .. 'groups:' .. status, fp)
    end
  end
  if best then
    redis.call('ZADD', K .. 'groups:any', best, fp)
  else
    redis.call('ZREM', K .. 'groups:any', fp)
    redis.call('DEL', K .. 'group:sample:' .. fp)
  end
end
local function unindexGroup(K, id, fp, status)
  if not fp or not status then return end
  local removed = redis.call('ZREM', gkey(K, status, 'last', fp), id)
  redis.call('ZREM', gkey(K, status, 'first', fp), id)
  if removed == 1 then redis.call('DECR', K .. 'grouped') end
  refreshGroup(K, fp)
end
local function indexGroup(K, id, fp, status, first, last)
  if redis.call('ZADD', gkey(K, status, 'last', fp), last, id) == 1 then redis.call('INCR', K .. 'grouped') end
  redis.call('ZADD', gkey(K, status, 'first', fp), first, id)
  refreshGroup(K, fp)
end
local function deleteRecord(K, key, id)
  local old = redis.call('HMGET', key, 'fp', 'status')
  local n = redis.call('DEL', key)
  if n == 1 then unindexGroup(K, id, old[1], old[2]) end
  return n
end
`;

/**
 * KEYS: record, index, sequence. ARGV: id, data, firstFailedAt, status, replays, maxRecords,
 * record key prefix, fingerprint, lastFailedAt, group sample JSON, keyspace. Returns the stored
 * firstFailedAt, status and replays.
 */
const ADD_SCRIPT = `${GROUP_LUA}
local K = ARGV[11]
if redis.call('EXISTS', KEYS[1]) == 1 then
  local old = redis.call('HMGET', KEYS[1], 'fp', 'status', 'first')
  unindexGroup(K, ARGV[1], old[1], old[2])
  redis.call('HSET', KEYS[1], 'data', ARGV[2], 'status', 'dead', 'fp', ARGV[8], 'last', ARGV[9])
  redis.call('HINCRBY', KEYS[1], 'v', 1)
  indexGroup(K, ARGV[1], ARGV[8], 'dead', old[3], ARGV[9])
  redis.call('SET', K .. 'group:sample:' .. ARGV[8], ARGV[10])
  return redis.call('HMGET', KEYS[1], 'first', 'status', 'replays')
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'first', ARGV[3], 'status', ARGV[4], 'replays', ARGV[5], 'v', 1, 'fp', ARGV[8], 'last', ARGV[9])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
indexGroup(K, ARGV[1], ARGV[8], ARGV[4], ARGV[3], ARGV[9])
redis.call('SET', K .. 'group:sample:' .. ARGV[8], ARGV[10])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[6])
if excess > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) do
    deleteRecord(K, ARGV[7] .. old, old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, excess - 1)
end
return {ARGV[3], ARGV[4], ARGV[5]}
`;

/**
 * KEYS: record. ARGV: replay entry JSON, most entries kept, id, keyspace. Returns 1, or 0 when there
 * is no record.
 */
const MARK_REPLAYED_SCRIPT = `${GROUP_LUA}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local entries = {}
for entry in string.gmatch(redis.call('HGET', KEYS[1], 'replays') or '', '[^\\n]+') do
  entries[#entries + 1] = entry
end
entries[#entries + 1] = ARGV[1]
local from = math.max(1, #entries - tonumber(ARGV[2]) + 1)
local old = redis.call('HMGET', KEYS[1], 'fp', 'status', 'first', 'last')
redis.call('HSET', KEYS[1], 'status', 'replayed', 'replays', table.concat(entries, '\\n', from))
redis.call('HINCRBY', KEYS[1], 'v', 1)
if old[1] and old[2] ~= 'replayed' then
  unindexGroup(ARGV[4], ARGV[3], old[1], old[2])
  indexGroup(ARGV[4], ARGV[3], old[1], 'replayed', old[3], old[4])
end
return 1
`;

/**
 * KEYS: index. ARGV: min score (ZRANGEBYSCORE syntax), count, record key prefix. Returns, per index
 * entry in order: id, score, then the record's fields (nil when the record is missing).
 */
const READ_CHUNK_SCRIPT = `
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i = 1, #entries, 2 do
  out[#out + 1] = entries[i]
  out[#out + 1] = entries[i + 1]
  local fields = redis.call('HMGET', ARGV[3] .. entries[i], ${RECORD_FIELDS.map((f) => `'${f}'`).join(', ')})
  for j = 1, ${RECORD_FIELDS.length} do out[#out + 1] = fields[j] end
end
return out
`;

/**
 * READ_CHUNK for a text search: ARGV adds two needles (lower case, ASCII), and only the entries whose
 * lower-cased `data` contains either are returned, after a header of how many entries were read and
 * the score of the last one. The records it keeps are a superset of the matches (the needles are the
 * text as JSON escapes it once, for the error, and twice, for the envelope inside `data`); the
 * caller applies the filter itself.
 */
const READ_TEXT_CHUNK_SCRIPT = `
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {#entries / 2, entries[#entries] or false}
for i = 1, #entries, 2 do
  local fields = redis.call('HMGET', ARGV[3] .. entries[i], ${RECORD_FIELDS.map((f) => `'${f}'`).join(', ')})
  local data = fields[1] and string.lower(fields[1])
  if data and (string.find(data, ARGV[4], 1, true) or string.find(data, ARGV[5], 1, true)) then
    out[#out + 1] = entries[i]
    out[#out + 1] = entries[i + 1]
    for j = 1, ${RECORD_FIELDS.length} do out[#out + 1] = fields[j] end
  end
end
return out
`;

/**
 * KEYS: index, then one record key per id. ARGV: keyspace, then the ids. Returns how many records
 * existed.
 */
const REMOVE_SCRIPT = `${GROUP_LUA}
local n = 0
for i = 2, #KEYS do
  n = n + deleteRecord(ARGV[1], KEYS[i], ARGV[i])
  redis.call('ZREM', KEYS[1], ARGV[i])
end
return n
`;

/**
 * KEYS: index, then one record key per id. ARGV: keyspace, then id and version pairs. Deletes each
 * record still at the version that was read; returns how many it deleted.
 */
const PURGE_SCRIPT = `${GROUP_LUA}
local n = 0
for i = 2, #KEYS do
  local id = ARGV[2 * i - 2]
  if redis.call('HGET', KEYS[i], 'v') == ARGV[2 * i - 1] then
    deleteRecord(ARGV[1], KEYS[i], id)
    redis.call('ZREM', KEYS[1], id)
    n = n + 1
  end
end
return n
`;

/**
 * KEYS: index, groups index of the state asked for. ARGV: keyspace, statuses to sum (space
 * separated), max score ('+inf' or the cursor's lastSeen), cursor fingerprint ('' for none), limit,
 * fingerprint filter ('' for none). Returns {ready, then per group: fp, count, firstSeen, lastSeen,
 * sample JSON}, at most limit + 1 groups; ready is 0 when records without aggregates exist.
 */
const GROUPS_SCRIPT = `
local K = ARGV[1]
if tonumber(redis.call('GET', K .. 'grouped') or '0') ~= redis.call('ZCARD', KEYS[1]) then return {0} end
local statuses = {}
for status in string.gmatch(ARGV[2], '%S+') do statuses[#statuses + 1] = status end
local limit = tonumber(ARGV[5])
local out = {1}
local found = 0
local offset = 0
while found <= limit do
  local chunk = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[3], '-inf', 'WITHSCORES', 'LIMIT', offset, 200)
  if #chunk == 0 then break end
  offset = offset + #chunk / 2
  for i = 1, #chunk, 2 do
    local fp, score = chunk[i], chunk[i + 1]
    local skip = (ARGV[6] ~= '' and fp ~= ARGV[6])
      or (ARGV[4] ~= '' and tonumber(score) == tonumber(ARGV[3]) and fp >= ARGV[4])
    if not skip and found <= limit then
      local count, first = 0, nil
      for _, status in ipairs(statuses) do
        count = count + redis.call('ZCARD', K .. 'group:' .. status .. ':last:' .. fp)
        local low = redis.call('ZRANGE', K .. 'group:' .. status .. ':first:' .. fp, 0, 0, 'WITHSCORES')
        if low[2] and (first == nil or tonumber(low[2]) < tonumber(first)) then first = low[2] end
      end
      out[#out + 1] = fp
      out[#out + 1] = count
      out[#out + 1] = first or score
      out[#out + 1] = score
      out[#out + 1] = redis.call('GET', K .. 'group:sample:' .. fp) or '{}'
      found = found + 1
    end
  end
end
return out
`;

/**
 * KEYS: index. ARGV: keyspace, statuses to sum (space separated), fingerprint ('' for all). Returns
 * the number of records, or -1 when records without aggregates exist.
 */
const COUNT_SCRIPT = `
local K = ARGV[1]
if tonumber(redis.call('GET', K .. 'grouped') or '0') ~= redis.call('ZCARD', KEYS[1]) then return -1 end
local n = 0
for status in string.gmatch(ARGV[2], '%S+') do
  if ARGV[3] ~= '' then
    n = n + redis.call('ZCARD', K .. 'group:' .. status .. ':last:' .. ARGV[3])
  else
    for _, fp in ipairs(redis.call('ZRANGE', K .. 'groups:' .. status, 0, -1)) do
      n = n + redis.call('ZCARD', K .. 'group:' .. status .. ':last:' .. fp)
    end
  end
end
return n
`;

/**
 * KEYS: record. ARGV: handledAt. Sets `handledAt` on the latest replay entry of a `replayed` record,
 * spliced into its JSON as text (no Lua JSON library, which would round numbers); keeps one already
 * set. Returns 1 when the latest replay is marked, 0 when there is no record, it is `dead` again,
 * or it has no replay.
 */
const MARK_REPLAY_HANDLED_SCRIPT = `
local state = redis.call('HMGET', KEYS[1], 'status', 'replays')
if state[1] ~= 'replayed' or not state[2] or state[2] == '' then return 0 end
local head, last = '', state[2]
local cut = string.find(last, '\\n[^\\n]*$')
if cut then
  head = string.sub(last, 1, cut)
  last = string.sub(last, cut + 1)
end
if string.find(last, '"handledAt":', 1, true) then return 1 end
if string.sub(last, -1) ~= '}' then return 0 end
redis.call('HSET', KEYS[1], 'replays', head .. string.sub(last, 1, -2) .. ',"handledAt":' .. ARGV[1] .. '}')
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1
`;

const SCRIPTS = {
  add: redisScript(ADD_SCRIPT),
  markReplayed: redisScript(MARK_REPLAYED_SCRIPT),
  markReplayHandled: redisScript(MARK_REPLAY_HANDLED_SCRIPT),
  readChunk: redisScript(READ_CHUNK_SCRIPT),
  readTextChunk: redisScript(READ_TEXT_CHUNK_SCRIPT),
  remove: redisScript(REMOVE_SCRIPT),
  purge: redisScript(PURGE_SCRIPT),
  groups: redisScript(GROUPS_SCRIPT),
  count: redisScript(COUNT_SCRIPT),
} as const;

/** The JSON kept in a record's `data` field: every field an update replaces. */
interface StoredData {
  readonly id: string;
  readonly messageId?: string;
  readonly kind?: MessageKind;
  readonly type?: string;
  readonly endpoint: string;
  readonly handler?: string;
  readonly reason: string;
  readonly error: ErrorInfo;
  readonly attempts: readonly AttemptRecord[];
  readonly attemptCount: number;
  readonly lastFailedAt: number;
  readonly fingerprint: string;
  readonly envelope: string;
  readonly partitionKey?: string;
  readonly ordered: boolean;
  readonly logPosition?: LogPosition;
}

/** One index entry as read back, with its record unless it vanished between writes. */
interface ChunkEntry {
  readonly id: string;
  readonly seq: number;
  readonly record: DeadLetterRecord | undefined;
  readonly version: string | undefined;
}

/** An error with only the fields of {@link ErrorInfo}, its stack capped again. */
function boundedError(error: ErrorInfo): ErrorInfo {
  return {
    name: error.name,
    message: error.message,
    ...(error.code !== undefined ? { code: error.code } : {}),
    ...(error.stack !== undefined ? { stack: error.stack.slice(0, MAX_STACK_CHARS) } : {}),
  };
}

function encodeData(record: DeadLetterRecord): string {
  const data: StoredData = {
    id: record.id,
    ...(record.messageId !== undefined ? { messageId: record.messageId } : {}),
    ...(record.kind !== undefined ? { kind: record.kind } : {}),
    ...(record.type !== undefined ? { type: record.type } : {}),
    endpoint: record.endpoint,
    ...(record.handler !== undefined ? { handler: record.handler } : {}),
    reason: record.reason,
    error: boundedError(record.error),
    // The record type promises these bounds, but a record built by hand or by another version may
    // break them, and a Redis that holds 100000 records must not grow without limit.
    attempts: record.attempts.slice(-MAX_ATTEMPT_HISTORY).map((attempt) => ({
      attempt: attempt.attempt,
      at: attempt.at,
      error: boundedError(attempt.error),
    })),
    attemptCount: record.attemptCount,
    lastFailedAt: record.lastFailedAt,
    fingerprint: record.fingerprint,
    envelope: record.envelope,
    ...(record.partitionKey !== undefined ? { partitionKey: record.partitionKey } : {}),
    ordered: record.ordered,
    ...(record.logPosition !== undefined
      ? {
          logPosition: {
            topic: record.logPosition.topic,
            partition: record.logPosition.partition,
            offset: record.logPosition.offset,
          },
        }
      : {}),
  };
  return JSON.stringify(data);
}

function encodeReplay(replay: ReplayRecord): string {
  return JSON.stringify({
    at: replay.at,
    ...(replay.by !== undefined ? { by: replay.by } : {}),
    ...(replay.handledAt !== undefined ? { handledAt: replay.handledAt } : {}),
  });
}

function decodeReplays(text: string): ReplayRecord[] {
  if (text === '') return [];
  return text.split('\n').map((line) => {
    const entry = JSON.parse(line) as { at: number; by?: string; handledAt?: number };
    return {
      at: entry.at,
      ...(entry.by !== undefined ? { by: entry.by } : {}),
      ...(entry.handledAt !== undefined ? { handledAt: entry.handledAt } : {}),
    };
  });
}

function decodeRecord(
  key: string,
  data: string,
  first: string,
  status: string,
  replays: string,
): DeadLetterRecord {
  let parsed: StoredData;
  let replayList: ReplayRecord[];
  try {
    parsed = JSON.parse(data) as StoredData;
    replayList = decodeReplays(replays);
  } catch (error) {
    throw new HarrierError(
      'dead-letter-corrupt',
      `Dead letter "${key}" in Redis is not valid JSON: something other than Harrier wrote to this key prefix; remove that record, and give the store a prefix of its own`,
      { cause: error },
    );
  }
  return {
    id: parsed.id,
    messageId: parsed.messageId,
    kind: parsed.kind,
    type: parsed.type,
    endpoint: parsed.endpoint,
    handler: parsed.handler,
    reason: parsed.reason,
    error: parsed.error,
    attempts: parsed.attempts,
    attemptCount: parsed.attemptCount,
    firstFailedAt: Number(first),
    lastFailedAt: parsed.lastFailedAt,
    fingerprint: parsed.fingerprint,
    envelope: parsed.envelope,
    partitionKey: parsed.partitionKey,
    ordered: parsed.ordered,
    ...(parsed.logPosition !== undefined ? { logPosition: parsed.logPosition } : {}),
    status: status as DeadLetterStatus,
    replays: replayList,
  };
}

/** The fields a group shows, kept beside its aggregates as JSON. */
interface GroupSample {
  readonly type?: string;
  readonly handler?: string;
  readonly endpoint?: string;
  readonly reason?: string;
  readonly sampleError?: string;
}

function encodeSample(record: DeadLetterRecord): string {
  const sample: GroupSample = {
    ...(record.type !== undefined ? { type: record.type } : {}),
    ...(record.handler !== undefined ? { handler: record.handler } : {}),
    endpoint: record.endpoint,
    reason: record.reason,
    sampleError: record.error.message,
  };
  return JSON.stringify(sample);
}

/**
 * The statuses whose aggregates answer `filter` (space separated, as the scripts read them), or
 * undefined when it sets a field other than status and fingerprint, which only a scan can answer.
 */
function aggregatedStatuses(filter: DeadLetterFilter): string | undefined {
  const { status = 'dead', fingerprint: _fingerprint, ...rest } = filter;
  // Checked at run time: a caller from JavaScript may spell an unset field as undefined.
  const others: readonly unknown[] = Object.values(rest);
  if (others.some((value) => value !== undefined)) return undefined;
  return status === 'any' ? 'dead replayed' : status;
}

function encodeCursor(seq: number): string {
  return Buffer.from(`${CURSOR_PREFIX}${seq}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): number {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const digits = text.startsWith(CURSOR_PREFIX) ? text.slice(CURSOR_PREFIX.length) : '';
  const seq = Number(digits);
  if (!/^\d+$/.test(digits) || !Number.isSafeInteger(seq)) {
    throw new HarrierError(
      'invalid-cursor',
      `Dead-letter cursor "${cursor}" was not issued by this store: pass the \`next\` of the previous page, or no cursor to start from the first page`,
    );
  }
  return seq;
}

/** A page of groups from the groups script's reply (five values per group, at most limit + 1 groups). */
function groupsPage(reply: readonly unknown[], limit: number): DeadLetterGroupPage {
  const groups: DeadLetterGroup[] = [];
  for (let i = 0; i + 5 <= reply.length; i += 5) {
    const [fingerprint, count, first, last, json] = reply.slice(i, i + 5);
    const sample = JSON.parse(String(json)) as GroupSample;
    groups.push({
      fingerprint: String(fingerprint),
      count: Number(count),
      firstSeen: Number(first),
      lastSeen: Number(last),
      ...(sample.type !== undefined ? { type: sample.type } : {}),
      ...(sample.handler !== undefined ? { handler: sample.handler } : {}),
      ...(sample.endpoint !== undefined ? { endpoint: sample.endpoint } : {}),
      reason: sample.reason ?? '',
      sampleError: sample.sampleError ?? '',
    });
  }
  const page = groups.slice(0, limit);
  const last = page.at(-1);
  return {
    groups: page,
    next: groups.length > limit && last !== undefined ? encodeGroupCursor(last) : undefined,
  };
}

/**
 * Keeps dead letters in Redis, so they outlive restarts and every process of an application sees the
 * same ones.
 *
 * @remarks
 * Each record is a hash under `<prefix>:dlq:record:<id>`; a sorted set `<prefix>:dlq:index` scores
 * each id by an insertion sequence (`<prefix>:dlq:seq`), so lists come in first-insertion order and
 * an update keeps its place. Every write is one Lua script, so concurrent stores on the same prefix
 * never leave two records for one id or a record without its index entry. Lists, counts and purges
 * walk the index in chunks and filter here, so their cost grows with the records held, not with the
 * records matched; `maxRecords` bounds both.
 *
 * Failures reject with a {@link HarrierError}: `redis-unavailable` when Redis cannot be reached,
 * `redis-command-failed` when it refuses a command, `store-closed` after {@link close},
 * `invalid-cursor` and `invalid-argument` for bad paging.
 *
 * @example
 * ```ts
 * const store = new RedisDeadLetterStore({ connection: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' });
 * const { records, next } = await store.list({ endpoint: 'billing' }, { limit: 50 });
 * await store.close();
 * ```
 */
export class RedisDeadLetterStore implements DeadLetterStore {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #errors: RedisErrorContext;
  readonly #maxRecords: number;
  /** Start of every key of the store, for messages. */
  readonly #keyspace: string;
  readonly #indexKey: string;
  readonly #seqKey: string;
  readonly #recordPrefix: string;
  /** The record prefix as Lua must spell it: keys built in a script do not get ioredis's `keyPrefix`. */
  readonly #scriptRecordPrefix: string;
  /** The keyspace as Lua must spell it. */
  readonly #scriptKeyspace: string;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `prefix` is empty or `maxRecords` is not a positive integer. */
  constructor(options: RedisDeadLetterStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisDeadLetterStore');
    const maxRecords = options.maxRecords ?? DEFAULT_MAX_RECORDS;
    if (!Number.isInteger(maxRecords) || maxRecords < 1) {
      throw new HarrierError(
        'invalid-option',
        `RedisDeadLetterStore maxRecords must be a positive integer, got ${maxRecords}: pass a whole number such as 100000, or leave it out for the default`,
      );
    }
    this.#maxRecords = maxRecords;
    this.#keyspace = `${prefix}:dlq:`;
    this.#indexKey = `${this.#keyspace}index`;
    this.#seqKey = `${this.#keyspace}seq`;
    this.#recordPrefix = `${this.#keyspace}record:`;

    this.#connection = connectionFor(options.connection, options);
    this.#client = this.#connection.client;
    this.#errors = {
      connection: this.#connection,
      command: 'a dead-letter store command',
      keyspace: this.#keyspace,
    };
    this.#scriptKeyspace = `${this.#client.options.keyPrefix ?? ''}${this.#keyspace}`;
    this.#scriptRecordPrefix = `${this.#scriptKeyspace}record:`;
  }

  add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    return this.#run(async () => {
      const key = this.#recordKey(record.id);
      const data = encodeData(record);
      const reply = await this.#eval(
        SCRIPTS.add,
        [key, this.#indexKey, this.#seqKey],
        [
          record.id,
          data,
          String(record.firstFailedAt),
          record.status,
          record.replays.slice(-MAX_REPLAY_HISTORY).map(encodeReplay).join('\n'),
          String(this.#maxRecords),
          this.#scriptRecordPrefix,
          record.fingerprint,
          String(record.lastFailedAt),
          encodeSample(record),
          this.#scriptKeyspace,
        ],
      );
      const [first, status, replays] = reply as [string, string, string];
      // Decoded from what was written, so the caller gets exactly what a later get() returns.
      return decodeRecord(key, data, first, status, replays);
    });
  }

  get(id: string): Promise<DeadLetterRecord | undefined> {
    return this.#run(async () => {
      const key = this.#recordKey(id);
      const [data, first, status, replays] = await this.#client.hmget(
        key,
        'data',
        'first',
        'status',
        'replays',
      );
      if (data == null) return undefined;
      return decodeRecord(key, data, first ?? '0', status ?? 'dead', replays ?? '');
    });
  }

  /** @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument` for a bad limit. */
  list(filter: DeadLetterFilter = {}, page: DeadLetterPageOptions = {}): Promise<DeadLetterPage> {
    return this.#run(async () => {
      const limit = page.limit ?? DEFAULT_PAGE_LIMIT;
      if (!Number.isInteger(limit) || limit < 1) {
        throw new HarrierError(
          'invalid-argument',
          `Dead-letter page limit must be a positive integer, got ${limit}: pass a whole number such as 100, or leave it out for the default`,
        );
      }
      const after = page.cursor === undefined ? undefined : decodeCursor(page.cursor);
      const records: DeadLetterRecord[] = [];
      let lastSeq = 0;
      let read = 0;
      for await (const entry of this.#scan(after, filter.text)) {
        if (entry.id === '') {
          // A text search reads a bounded number of records per page, so a rare text still answers
          // quickly: the page then ends where the reading stopped, however few it holds.
          read += TEXT_SCAN_CHUNK;
          if (read >= TEXT_SCAN_BUDGET) return { records, next: encodeCursor(entry.seq) };
          continue;
        }
        if (entry.record === undefined || !matchesDeadLetterFilter(entry.record, filter)) continue;
        // One match past the page says whether there is a next page, so a page that ends exactly at
        // the last match reports none.
        if (records.length === limit) return { records, next: encodeCursor(lastSeq) };
        records.push(entry.record);
        lastSeq = entry.seq;
      }
      return { records, next: undefined };
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.count}
   *
   * @remarks
   * A filter of status and fingerprint alone is answered from the failure-group aggregates; any
   * other field walks the records.
   */
  count(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(async () => {
      if (selectsEveryDeadLetter(filter)) return await this.#client.zcard(this.#indexKey);
      const statuses = aggregatedStatuses(filter);
      if (statuses !== undefined) {
        const n = Number(
          await this.#eval(
            SCRIPTS.count,
            [this.#indexKey],
            [this.#scriptKeyspace, statuses, filter.fingerprint ?? ''],
          ),
        );
        if (n >= 0) return n;
      }
      let n = 0;
      for await (const entry of this.#scan(undefined, filter.text)) {
        if (entry.record !== undefined && matchesDeadLetterFilter(entry.record, filter)) n++;
      }
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.groups}
   *
   * @remarks
   * Every write keeps per-fingerprint aggregates in the same script as the record, so a filter of
   * status and fingerprint alone is answered from them in time that grows with the groups on the
   * page, not with the records held. Any other field (endpoint, time window, text, ...) walks the
   * records, as `list` does. So do records written by a Harrier from before groups existed, until
   * they are removed or added again.
   */
  groups(filter: DeadLetterFilter = {}, page: DeadLetterGroupPageOptions = {}): Promise<DeadLetterGroupPage> {
    return this.#run(async () => {
      const limit = groupPageLimit(page);
      const after = page.cursor === undefined ? undefined : decodeGroupCursor(page.cursor);
      const statuses = aggregatedStatuses(filter);
      if (statuses !== undefined) {
        const state = filter.status ?? 'dead';
        const reply = (await this.#eval(
          SCRIPTS.groups,
          [this.#indexKey, `${this.#keyspace}groups:${state}`],
          [
            this.#scriptKeyspace,
            statuses,
            after === undefined ? '+inf' : String(after.lastSeen),
            after?.fingerprint ?? '',
            String(limit),
            filter.fingerprint ?? '',
          ],
        )) as unknown[];
        if (reply[0] === 1) return groupsPage(reply.slice(1), limit);
      }
      const accumulator = new DeadLetterGroupAccumulator();
      for await (const entry of this.#scan(undefined, filter.text)) {
        if (entry.record !== undefined && matchesDeadLetterFilter(entry.record, filter)) {
          accumulator.add(entry.record, entry.seq);
        }
      }
      return accumulator.page(page);
    });
  }

  markReplayed(id: string, replay: ReplayRecord): Promise<boolean> {
    return this.#run(async () => {
      const reply = await this.#eval(
        SCRIPTS.markReplayed,
        [this.#recordKey(id)],
        [encodeReplay(replay), String(MAX_REPLAY_HISTORY), id, this.#scriptKeyspace],
      );
      return reply === 1;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.markReplayHandled}
   *
   * @remarks
   * One script, so it never marks a record that died again meanwhile.
   */
  markReplayHandled(id: string, at: number): Promise<boolean> {
    return this.#run(async () => {
      const reply = await this.#eval(SCRIPTS.markReplayHandled, [this.#recordKey(id)], [String(at)]);
      return reply === 1;
    });
  }

  remove(ids: readonly string[]): Promise<number> {
    return this.#run(async () => {
      // An id given twice is counted once, as the in-memory store does.
      const unique = [...new Set(ids)];
      let n = 0;
      for (let i = 0; i < unique.length; i += REMOVE_BATCH) {
        const batch = unique.slice(i, i + REMOVE_BATCH);
        const keys = [this.#indexKey, ...batch.map((id) => this.#recordKey(id))];
        n += Number(await this.#eval(SCRIPTS.remove, keys, [this.#scriptKeyspace, ...batch]));
      }
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.purge}
   *
   * @remarks
   * Deletes chunk by chunk, each chunk atomically. A record changed by another process between being
   * read and being deleted is kept, so a purge never deletes a record that no longer matches.
   */
  purge(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(async () => {
      let n = 0;
      let after: number | undefined;
      for (;;) {
        const chunk = await this.#readChunk(after);
        const doomed = chunk.filter(
          (entry): entry is ChunkEntry & { record: DeadLetterRecord; version: string } =>
            entry.record !== undefined &&
            entry.version !== undefined &&
            matchesDeadLetterFilter(entry.record, filter),
        );
        if (doomed.length > 0) {
          const keys = [this.#indexKey, ...doomed.map((entry) => this.#recordKey(entry.id))];
          const args = [this.#scriptKeyspace, ...doomed.flatMap((entry) => [entry.id, entry.version])];
          n += Number(await this.#eval(SCRIPTS.purge, keys, args));
        }
        const last = chunk.at(-1);
        if (last === undefined || chunk.length < SCAN_CHUNK) return n;
        after = last.seq;
      }
    });
  }

  /**
   * Quits the client the store created from a URL; a client passed in is left open. Records stay in
   * Redis. Later calls reject with `store-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  #recordKey(id: string): string {
    return `${this.#recordPrefix}${id}`;
  }

  /**
   * Every index entry after sequence `after`, in order, read a chunk per round trip; with `text`,
   * Redis drops most entries that cannot contain it, so fewer records travel and are decoded.
   */
  async *#scan(after: number | undefined, text?: string): AsyncGenerator<ChunkEntry> {
    // Lua's lower() knows only ASCII, so only an ASCII needle can be matched in Redis.
    if (text !== undefined && /^[\x20-\x7e]*$/.test(text)) {
      yield* this.#scanText(after, text);
      return;
    }
    let from = after;
    for (;;) {
      const chunk = await this.#readChunk(from);
      yield* chunk;
      const last = chunk.at(-1);
      if (last === undefined || chunk.length < SCAN_CHUNK) return;
      from = last.seq;
    }
  }

  async *#scanText(after: number | undefined, text: string): AsyncGenerator<ChunkEntry> {
    const once = JSON.stringify(text.toLowerCase()).slice(1, -1);
    const twice = JSON.stringify(once).slice(1, -1);
    let from = after;
    for (;;) {
      const reply = (await this.#eval(
        SCRIPTS.readTextChunk,
        [this.#indexKey],
        [
          from === undefined ? '-inf' : `(${from}`,
          String(TEXT_SCAN_CHUNK),
          this.#scriptRecordPrefix,
          once,
          twice,
        ],
      )) as unknown[];
      yield* this.#entriesOf(reply.slice(2));
      const [read, last] = reply;
      if (Number(read) < TEXT_SCAN_CHUNK || typeof last !== 'string') return;
      from = Number(last);
      // A marker (no id) after each full chunk: where the reading got to, for list's budget.
      yield { id: '', seq: from, record: undefined, version: undefined };
    }
  }

  async #readChunk(after: number | undefined): Promise<ChunkEntry[]> {
    const reply = (await this.#eval(
      SCRIPTS.readChunk,
      [this.#indexKey],
      [after === undefined ? '-inf' : `(${after}`, String(SCAN_CHUNK), this.#scriptRecordPrefix],
    )) as unknown[];
    return this.#entriesOf(reply);
  }

  /** The entries of a chunk script's reply: id, score, then the record's fields, per entry. */
  #entriesOf(reply: readonly unknown[]): ChunkEntry[] {
    // A missing field comes back as nil over RESP2 but may come back as false over RESP3.
    const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
    const width = 2 + RECORD_FIELDS.length;
    const entries: ChunkEntry[] = [];
    for (let i = 0; i + width <= reply.length; i += width) {
      const [id, score, data, first, status, replays, version] = reply.slice(i, i + width).map(text);
      if (id === undefined || score === undefined) continue;
      const key = this.#recordKey(id);
      entries.push({
        id,
        seq: Number(score),
        record:
          data === undefined
            ? undefined
            : decodeRecord(key, data, first ?? '0', status ?? 'dead', replays ?? ''),
        version,
      });
    }
    return entries;
  }

  #eval(script: RedisScript, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return evalScript(this.#client, script, keys, args);
  }

  /** Runs `body` on an open store and turns Redis's failures into {@link HarrierError}s. */
  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis dead-letter store is closed: create a new RedisDeadLetterStore to use dead letters again',
      );
    }
    return runCommand(body, this.#errors);
  }
}
