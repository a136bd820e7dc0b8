import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import type { ScriptCall } from './script-call.js';

/**
 * KEYS: record. ARGV: handledAt. Sets `handledAt` on the latest replay entry of a `replayed` record,
 * spliced into its JSON as text (no Lua JSON library, which would round numbers); keeps one already
 * set. Returns 1 when the latest replay is marked, 0 when there is no record, it is `dead` again,
 * or it has no replay.
 */
export const MARK_REPLAY_HANDLED_SCRIPT = redisScript(`
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
`);

/** The run of {@link MARK_REPLAY_HANDLED_SCRIPT} that marks the latest replay of the record `id` handled `at`. */
export function markReplayHandledScriptCall(keys: DeadLetterKeys, id: string, at: number): ScriptCall {
  return { script: MARK_REPLAY_HANDLED_SCRIPT, keys: [keys.record(id)], args: [String(at)] };
}
