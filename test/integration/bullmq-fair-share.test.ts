import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { silentLogger } from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { fairShareSubscriptions } from './fixtures/fair-share.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CHILD = fileURLToPath(new URL('./fixtures/bullmq-receiver-process.ts', import.meta.url));

const TYPE = 'fair.Happened';
const PARTITIONS = 8;
const PREFETCH = 4;

/** The endpoint's subscriptions in each case, and the events published to them. */
interface Shape {
  readonly label: string;
  readonly subscriptions: number;
  readonly ordered: boolean;
  readonly queues: number;
  readonly events: number;
}

const SHAPES: readonly Shape[] = [
  // Partition queues: one job at a time each (a worker of concurrency 1 per process).
  {
    label: '4 ordered subscriptions of 8 partitions',
    subscriptions: 4,
    ordered: true,
    queues: 36,
    events: 120,
  },
  // Unordered queues: each worker may run PREFETCH jobs, so workers compete for the slots.
  { label: '12 unordered subscriptions', subscriptions: 12, ordered: false, queues: 12, events: 40 },
];

/** The lock tokens (`<worker id>:<n>`) of every active job of `queues`, read in one atomic script. */
const ACTIVE_LOCKS = `
local tokens = {}
for _, active in ipairs(KEYS) do
  local base = string.sub(active, 1, #active - #'active')
  for _, id in ipairs(redis.call('LRANGE', active, 0, -1)) do
    local token = redis.call('GET', base .. id .. ':lock')
    if token then table.insert(tokens, token) end
  end
end
return tokens`;

interface ReceiverProcess {
  readonly child: ChildProcess;
  /** Delivery ids it acked, in order. */
  readonly acked: string[];
  output(): string;
}

const children: ReceiverProcess[] = [];
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  await Promise.all(
    children.splice(0).map(
      ({ child }) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) {
            resolve();
            return;
          }
          const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
          child.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
          child.kill('SIGTERM');
        }),
    ),
  );
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** Starts a receiver of endpoint `fair` in a process of its own and waits until it runs. */
async function startReceiver(prefix: string, shape: Shape): Promise<ReceiverProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    cwd: ROOT,
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      HARRIER_PREFIX: prefix,
      TYPE,
      SUBSCRIPTIONS: String(shape.subscriptions),
      ORDERED: shape.ordered ? '1' : '0',
      PARTITIONS: String(PARTITIONS),
      PREFETCH: String(PREFETCH),
      HANDLE_MS: '20',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let pending = '';
  const state = { ready: false };
  const acked: string[] = [];
  child.stdout.on('data', (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const parsed = JSON.parse(line) as { ready?: boolean; delivery?: string };
      if (parsed.ready === true) state.ready = true;
      if (parsed.delivery !== undefined) acked.push(parsed.delivery);
    }
  });
  child.stderr.on('data', (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4_000);
  });
  const receiver: ReceiverProcess = { child, acked, output: () => output };
  children.push(receiver);
  await waitFor('the receiver process to run', () => state.ready || child.exitCode !== null, {
    timeoutMs: 20_000,
    explain: () => output,
  });
  if (!state.ready) throw new Error(`The receiver process exited:\n${output}`);
  return receiver;
}

/** The BullMQ worker id in a delivery id (`<worker id>:<n>|<job id>|<starts>`). */
const workerOf = (token: string): string => token.slice(0, token.lastIndexOf(':'));

describe('BullMqBroker', () => {
  describe('.receiver', () => {
    for (const shape of SHAPES) {
      describe(`when two processes of one endpoint share ${shape.label} and a slow handler`, () => {
        it('holds no more jobs per receiver than its prefetch, and both receivers get work', async () => {
          const prefix = freshPrefix();
          const publisher = new BullMqBroker({
            connection: redisUrl,
            prefix,
            partitions: PARTITIONS,
            logger: silentLogger,
          });
          const admin = new Redis(redisUrl);
          cleanups.push(async () => {
            await publisher.close();
            await deleteKeys(admin, prefix);
            admin.disconnect();
          });
          // Registered here too (idempotent), only to learn the queue names.
          await publisher.register('fair', fairShareSubscriptions(TYPE, shape.subscriptions, shape.ordered));
          const queues = publisher.queuesOf('fair');
          expect(queues).toHaveLength(shape.queues);
          const one = await startReceiver(prefix, shape);
          const two = await startReceiver(prefix, shape);

          await publisher.publishBatch(
            Array.from({ length: shape.events }, (_, i) => ({
              id: randomUUID(),
              kind: 'event' as const,
              type: TYPE,
              body: `event ${i}`,
              partitionKey: `key-${i}`,
              ordered: shape.ordered,
            })),
          );
          const total = shape.events * shape.subscriptions;
          const samples: string[][] = [];
          const activeKeys = queues.map((queue) => `${prefix}:${queue}:active`);
          await waitFor(
            'every job to be acked',
            async () => {
              samples.push((await admin.eval(ACTIVE_LOCKS, activeKeys.length, ...activeKeys)) as string[]);
              return one.acked.length + two.acked.length >= total;
            },
            {
              timeoutMs: 60_000,
              explain: () =>
                `acked ${one.acked.length} + ${two.acked.length} of ${total}; stderr: ${one.output()} ${two.output()}`,
            },
          );

          // Both processes got work: neither locked the other out of the endpoint's queues.
          expect(one.acked.length).toBeGreaterThan(total / 10);
          expect(two.acked.length).toBeGreaterThan(total / 10);
          // Every copy was handled, once: no queue starved.
          expect(one.acked.length + two.acked.length).toBe(total);
          // Attribute every lock seen to its process by the worker ids in the delivery ids it acked.
          const owner = new Map<string, ReceiverProcess>();
          for (const receiver of [one, two])
            for (const id of receiver.acked) owner.set(workerOf(id.split('|')[0] ?? ''), receiver);
          const busiest = { one: 0, two: 0 };
          for (const tokens of samples) {
            const held = { one: 0, two: 0 };
            for (const token of tokens) {
              const receiver = owner.get(workerOf(token));
              expect(receiver, `lock token ${token} belongs to neither process`).toBeDefined();
              if (receiver === one) held.one++;
              else held.two++;
            }
            busiest.one = Math.max(busiest.one, held.one);
            busiest.two = Math.max(busiest.two, held.two);
          }
          expect(samples.length).toBeGreaterThan(10);
          expect(busiest.one).toBeGreaterThan(0);
          expect(busiest.one).toBeLessThanOrEqual(PREFETCH);
          expect(busiest.two).toBeLessThanOrEqual(PREFETCH);
        }, 90_000);
      });
    }
  });
});
