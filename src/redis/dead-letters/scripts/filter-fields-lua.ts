import type { DeadLetterRecord } from '../../../dead-letters/dead-letter-store.js';
import { optionalArg } from './script-call.js';

/**
 * Lua of the add script: the fields the filter scan reads instead of decoding `data`. `x` marks a
 * record that has them (records written by a Harrier from before them have none, and the scan leaves
 * those to Node); `x:ep` and `x:rs` hold endpoint and reason, `x:type` and `x:hd` type and handler,
 * absent when undefined. Arguments from `first` on: endpoint, type, handler, reason, each '' when
 * undefined and '=' then the value otherwise, so an empty string stays apart from undefined.
 */
export const FILTER_FIELDS_LUA = `
local function setFilterFields(key, first)
  local names = {'x:ep', 'x:type', 'x:hd', 'x:rs'}
  redis.call('HSET', key, 'x', '1')
  for i, name in ipairs(names) do
    local arg = ARGV[first + i - 1]
    if arg == '' then redis.call('HDEL', key, name) else redis.call('HSET', key, name, string.sub(arg, 2)) end
  end
end
`;

/** The filter field arguments of `record`, in the order {@link FILTER_FIELDS_LUA} reads them. */
export function filterFieldArgs(record: DeadLetterRecord): string[] {
  return [record.endpoint, record.type, record.handler, record.reason].map(optionalArg);
}
