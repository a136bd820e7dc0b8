import { HarrierError } from '../errors/harrier-error.js';
import { UnknownTopicError } from '../errors/unknown-topic-error.js';
import { partitionOf } from '../messages/partition.js';
import type { TopicInfo, TopicSpec } from './event-log.js';

const WILDCARDS = /[*?[\]>\s]/;

/**
 * Checks a topics manifest and indexes it by name.
 * @throws HarrierError `invalid-topic` naming the topic and the rule it breaks.
 */
export function indexTopics(manifest: readonly TopicSpec[]): Map<string, TopicSpec> {
  const topics = new Map<string, TopicSpec>();
  for (const spec of manifest) {
    const bytes = Buffer.byteLength(spec.name, 'utf8');
    if (bytes === 0 || bytes > 256) {
      throw new HarrierError(
        'invalid-topic',
        `Topic name "${spec.name}" is ${bytes} bytes: use 1 to 256 UTF-8 bytes`,
      );
    }
    if (WILDCARDS.test(spec.name)) {
      throw new HarrierError(
        'invalid-topic',
        `Topic name "${spec.name}" contains a wildcard or whitespace (* ? [ ] > or a space): use a plain name such as "orders"`,
      );
    }
    if (!Number.isInteger(spec.partitions) || spec.partitions < 1 || spec.partitions > 1024) {
      throw new HarrierError(
        'invalid-topic',
        `Topic "${spec.name}" has ${spec.partitions} partitions: use a whole number from 1 to 1024`,
      );
    }
    if (spec.retentionMs !== undefined && !(spec.retentionMs > 0)) {
      throw new HarrierError(
        'invalid-topic',
        `Topic "${spec.name}" has retentionMs ${spec.retentionMs}: use a positive number of ms, or leave it out to keep records forever`,
      );
    }
    if (topics.has(spec.name))
      throw new HarrierError(
        'invalid-topic',
        `Topic "${spec.name}" is listed twice in the manifest: list it once`,
      );
    topics.set(spec.name, spec);
  }
  return topics;
}

/** The spec of a provisioned topic. @throws UnknownTopicError */
export function topicOf(topics: ReadonlyMap<string, TopicSpec>, name: string): TopicSpec {
  const spec = topics.get(name);
  if (spec === undefined) throw new UnknownTopicError(name);
  return spec;
}

/** The partition of a key in a topic. */
export function partitionFor(spec: TopicSpec, key: string): number {
  return partitionOf(key, spec.partitions);
}

/** Checks a partition number against a topic. @throws HarrierError `invalid-partition` */
export function checkPartition(spec: TopicSpec, partition: number): void {
  if (!Number.isInteger(partition) || partition < 0 || partition >= spec.partitions) {
    throw new HarrierError(
      'invalid-partition',
      `Topic "${spec.name}" has partitions 0 to ${spec.partitions - 1}; ${partition} is not one of them`,
    );
  }
}

/** The public description of a topic. */
export function topicInfo(spec: TopicSpec): TopicInfo {
  return { name: spec.name, partitions: spec.partitions, retentionMs: spec.retentionMs };
}

/**
 * Validates a record body against the topic's schema, when it has one.
 * @throws HarrierError `validation-failed`
 */
export function checkSchema(spec: TopicSpec, body: string): void {
  if (spec.schema === undefined) return;
  let payload: unknown;
  try {
    payload = (JSON.parse(body) as { payload?: unknown }).payload;
  } catch {
    throw new HarrierError(
      'validation-failed',
      `A record for topic "${spec.name}" is not an encoded envelope (not JSON)`,
    );
  }
  const result = spec.schema.safeParse(payload);
  if (!result.success) {
    throw new HarrierError(
      'validation-failed',
      `A record for topic "${spec.name}" does not match the topic schema: ${result.error.issues[0]?.message ?? 'invalid'}`,
    );
  }
}

/**
 * Checks the arguments of `EventLog.read`.
 * @throws HarrierError `invalid-argument` naming the bad value.
 */
export function checkReadRange(fromOffset: number, max: number, maxBatch: number): void {
  if (!Number.isInteger(fromOffset) || fromOffset < 0) {
    throw new HarrierError(
      'invalid-argument',
      `read fromOffset must be a whole number from 0, got ${fromOffset}`,
    );
  }
  if (!Number.isInteger(max) || max < 1) {
    throw new HarrierError(
      'invalid-argument',
      `read max must be a positive whole number, got ${max}: pass up to ${maxBatch}`,
    );
  }
}
