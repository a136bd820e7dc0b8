import { redisScript } from './redis-support.js';

/**
 * Takes a delayed job out of its queue's delayed set, only if it was never delivered and its data is
 * still what the caller read: KEYS the queue's delayed set, then the job's hash; ARGV the job id,
 * then its data as read. Returns 1 when it took the job out (the caller then removes the job), else 0.
 *
 * @remarks
 * The data check makes the take atomic with the caller's read: a job delivered and put back for a
 * retry in between has new data (its attempt count) and is left alone. A job that ended unsettled
 * (a stalled count) was delivered, so it is left alone too.
 */
export const CANCEL_DELAYED_SCRIPT = redisScript(`
if redis.call('HGET', KEYS[2], 'data') ~= ARGV[2] then return 0 end
local stalled = redis.call('HGET', KEYS[2], 'stc')
if stalled and stalled ~= '0' then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
`);
