import type { OutgoingMessage } from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerContext } from './handler-context.js';
import type { MessagePublisher } from './message-publisher.js';

/**
 * Publishes what a handler recorded on its context, once it succeeded (the unit of work's commit);
 * resolves to the messages published.
 *
 * @throws HarrierError `internal` when the handler recorded messages and there is no publisher.
 */
export async function commitRecorded(
  publisher: MessagePublisher | undefined,
  context: HandlerContext,
): Promise<readonly OutgoingMessage[]> {
  if (context.recorded.length === 0) return [];
  const messages = context.recorded.map((p) => p.outgoing);
  await publishRecorded(publisher, context.handler, messages);
  return messages;
}

/**
 * Publishes messages handler `handler` recorded, idempotent by id (a saga step's commit calls it
 * once its state is saved).
 *
 * @throws HarrierError `internal` when there are messages and no publisher.
 */
export async function publishRecorded(
  publisher: MessagePublisher | undefined,
  handler: string,
  messages: readonly OutgoingMessage[],
): Promise<void> {
  if (messages.length === 0) return;
  if (publisher === undefined) {
    throw new HarrierError(
      'internal',
      `Handler "${handler}" recorded ${messages.length} message(s) but this pipeline has no publisher: give it one (HandlerPipelineOptions.publisher)`,
    );
  }
  await publisher.publish(messages, FROM_HANDLER);
}

const FROM_HANDLER = { origin: 'handler' } as const;
