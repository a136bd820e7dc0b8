// The dead letters the dead-letter benches fill Redis with, and the fill itself.

import { performance } from 'node:perf_hooks';
import type { DeadLetterRecord, DeadLetterStore } from '../src/index.js';
import { buildDeadLetterRecord } from '../src/dead-letters/dead-letter-record.js';

/** Fingerprints the records fall into (one failing handler each). */
export const BENCH_FINGERPRINTS = 50;
/** When record 0 failed. */
export const BENCH_T0 = Date.UTC(2026, 0, 1);

/** How the records of a bench differ from one another. */
export interface BenchDeadLetterShape {
  /** Time between two records' failures, in ms. */
  readonly spacingMs: number;
  /** Reasons, taken in turn. */
  readonly reasons: readonly string[];
}

/**
 * Record `n`: fingerprint and handler `n % 50`, type `n % 10`, endpoint `n % 5`, a stack and a small
 * payload (an order id, one of 997 SKUs), failed at `BENCH_T0 + n * spacingMs`.
 */
export function benchDeadLetter(n: number, shape: BenchDeadLetterShape): DeadLetterRecord {
  const kind = n % BENCH_FINGERPRINTS;
  const messageId = `0190${n.toString(16).padStart(28, '0')}`;
  const type = `orders.Event${n % 10}`;
  const at = BENCH_T0 + n * shape.spacingMs;
  const error = {
    name: 'Error',
    message: `Payment gateway ${kind} refused order ${n}`,
    stack: `Error: Payment gateway ${kind} refused order ${n}\n    at Handler${kind}.handle (/app/src/handlers/handler-${kind}.ts:${10 + kind}:7)\n    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)`,
  };
  const body = JSON.stringify({
    v: 1,
    id: messageId,
    kind: 'event',
    type,
    payload: { orderId: `o-${n}`, sku: `SKU-${n % 997}`, amount: n % 1000 },
    meta: { correlationId: messageId, occurredAt: new Date(at).toISOString(), headers: {} },
  });
  return buildDeadLetterRecord({
    body,
    facts: {
      messageId,
      kind: 'event',
      type,
      endpoint: `endpoint-${n % 5}`,
      handler: `Handler${kind}`,
      attempt: 1,
      history: [],
      partitionKey: `o-${n}`,
    },
    handler: `Handler${kind}`,
    reason: shape.reasons[n % shape.reasons.length] ?? 'handler-failed',
    error,
    ordered: false,
    now: at,
  });
}

/** Adds records 0 to `count - 1` with `concurrency` adds in flight; returns how long it took, in ms. */
export async function fillDeadLetters(
  store: DeadLetterStore,
  count: number,
  recordOf: (n: number) => DeadLetterRecord,
  concurrency: number,
): Promise<number> {
  const started = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) await store.add(recordOf(next++));
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return performance.now() - started;
}
