import { randomUUID } from 'node:crypto';
import type { SubscriptionSpec } from '../broker/message-broker.js';
import { routesVersion, type Route } from '../broker/event-route-cache.js';
import type { QueueLayout } from './queue-layout.js';
import type { RedisClient } from './redis-connection.js';
import { evalScript, redisScript } from './redis-support.js';

/**
 * Replaces an endpoint's registration in one step: its record in the `endpoints` hash, and its
 * fields in the `routes:<type>` hashes of the types it subscribes to now or did in its previous
 * record (a field of another endpoint is never touched; endpoint and handler names hold no `~`, so
 * the field prefix `evt~<endpoint>~` is this endpoint's alone). Then it moves the routes version.
 *
 * KEYS: endpoints hash, routes-version, routes-stamp. ARGV: the routes keys' prefix, the endpoint,
 * its record, the new stamp, its fields' prefix, then (type, field, route) per event route.
 * Returns the new routes-version count.
 */
const REGISTER_SCRIPT = `
local routesPrefix, endpoint, own = ARGV[1], ARGV[2], ARGV[5]
local wanted, types = {}, {}
for i = 6, #ARGV, 3 do
  local t = ARGV[i]
  wanted[t] = wanted[t] or {}
  wanted[t][ARGV[i + 1]] = ARGV[i + 2]
  types[t] = true
end
local previous = redis.call('HGET', KEYS[1], endpoint)
if previous then
  local ok, record = pcall(cjson.decode, previous)
  if ok and type(record) == 'table' and type(record.subscriptions) == 'table' then
    for _, sub in ipairs(record.subscriptions) do
      if type(sub) == 'table' and type(sub.types) == 'table' then
        for _, t in ipairs(sub.types) do
          if type(t) == 'string' then types[t] = true end
        end
      end
    end
  end
end
for t in pairs(types) do
  local key = routesPrefix .. t
  local keep = wanted[t] or {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, #own) == own and keep[field] == nil then redis.call('HDEL', key, field) end
  end
  for field, route in pairs(keep) do redis.call('HSET', key, field, route) end
end
redis.call('HSET', KEYS[1], endpoint, ARGV[3])
redis.call('SET', KEYS[3], ARGV[4])
return redis.call('INCR', KEYS[2])
`;

const REGISTER = redisScript(REGISTER_SCRIPT);

/**
 * Sets `endpoint`'s subscriptions in Redis to `subscriptions`, replacing its previous registration
 * (see `MessageBroker.register`); resolves to the routes version it wrote.
 *
 * @remarks
 * One script, so two processes of an endpoint registering at once (a rolling deploy) leave the
 * routes of one registration whole, never a mix; the last one wins. Publishers cache routes under
 * the version (`routes-stamp` and the `routes-version` counter), which the script moves, so every
 * publish that begins after it returned reads the new routes.
 */
export async function registerEndpoint(
  client: RedisClient,
  layout: QueueLayout,
  endpoint: string,
  subscriptions: readonly SubscriptionSpec[],
  registeredAt: number,
): Promise<string | null> {
  const routes: string[] = [];
  for (const sub of subscriptions) {
    if (sub.kind !== 'event') continue;
    const route: Route = { endpoint, handler: sub.handler, orderedTypes: sub.orderedTypes ?? [] };
    const field = layout.subscriptionQueue(endpoint, sub.handler);
    for (const type of sub.types) routes.push(type, field, JSON.stringify(route));
  }
  const stamp = randomUUID();
  const counter = await evalScript(
    client,
    REGISTER,
    [layout.key('endpoints'), layout.key('routes-version'), layout.key('routes-stamp')],
    [
      `${layout.key('routes')}:`,
      endpoint,
      JSON.stringify({ subscriptions, registeredAt }),
      stamp,
      layout.subscriptionQueue(endpoint, ''),
      ...routes,
    ],
  );
  return routesVersion(stamp, String(counter));
}
