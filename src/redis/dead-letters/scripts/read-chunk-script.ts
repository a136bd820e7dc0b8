import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import { RECORD_FIELDS } from '../record-codec.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: index. ARGV: min score (ZRANGEBYSCORE syntax), count, record key prefix. Returns, per index
 * entry in order: id, score, then the record's fields (nil when the record is missing).
 */
export const READ_CHUNK_SCRIPT = redisScript(`
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i = 1, #entries, 2 do
  out[#out + 1] = entries[i]
  out[#out + 1] = entries[i + 1]
  local fields = redis.call('HMGET', ARGV[3] .. entries[i], ${RECORD_FIELDS.map((f) => `'${f}'`).join(', ')})
  for j = 1, ${RECORD_FIELDS.length} do out[#out + 1] = fields[j] end
end
return out
`);

/** The run of {@link READ_CHUNK_SCRIPT} that reads up to `count` index entries after sequence `after`. */
export function readChunkScriptCall(
  keys: DeadLetterKeys,
  after: number | undefined,
  count: number,
): ScriptCall {
  return {
    script: READ_CHUNK_SCRIPT,
    keys: [keys.index],
    args: [after === undefined ? '-inf' : `(${after}`, String(count), keys.scriptRecordPrefix],
  };
}
