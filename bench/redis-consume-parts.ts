/**
 * CPU per call of two receive-side parts of a Redis consume, measured without Redis: the envelope
 * frame check (`isEnvelopeFrame`) on an envelope whose correlation id is its own id, and one
 * wait-then-push hand-off through the receiver's `AsyncInbox`.
 *
 * Both run in the same process after a warm-up; compare two builds by running each build's copy
 * one after the other. Run: `npm run bench:build && node .bench/bench/redis-consume-parts.js`.
 */
import { isEnvelopeFrame } from '../src/messages/envelope.js';
import { AsyncInbox } from '../src/broker/async-inbox.js';
import { table } from './support.js';

const FRAMES = 2_000_000;
const HAND_OFFS = 500_000;
const id = '0190b8e2-7c1a-7abc-8def-0123456789ab';
const envelope: unknown = JSON.parse(
  JSON.stringify({
    v: 1,
    id,
    kind: 'command',
    type: 'orders.PlaceOrder',
    payload: { orderId: 'o-1', n: 2 },
    meta: { correlationId: id, occurredAt: '2026-01-01T00:00:00.000Z', headers: {} },
  }),
);

/** CPU ns per iteration of `run(n)`. */
async function cpuNs(n: number, run: (n: number) => Promise<number> | number): Promise<number> {
  await run(Math.ceil(n / 10));
  const start = process.cpuUsage();
  await run(n);
  const used = process.cpuUsage(start);
  return ((used.user + used.system) * 1000) / n;
}

function frames(n: number): number {
  let accepted = 0;
  for (let i = 0; i < n; i++) if (isEnvelopeFrame(envelope)) accepted++;
  if (accepted !== n) throw new Error('the bench envelope was refused');
  return accepted;
}

async function handOffs(n: number): Promise<number> {
  const inbox = new AsyncInbox<number>();
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const next = inbox.next();
    inbox.push(i);
    sum += (await next) ?? 0;
  }
  return sum;
}

const frameNs = await cpuNs(FRAMES, frames);
const handOffNs = await cpuNs(HAND_OFFS, handOffs);
console.log(
  table(
    ['part', 'CPU ns/call'],
    [
      ['isEnvelopeFrame (correlationId = id)', frameNs.toFixed(1)],
      ['AsyncInbox next() + push()', handOffNs.toFixed(1)],
    ],
  ),
);
