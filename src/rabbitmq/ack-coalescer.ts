import type { Channel, Message } from 'amqplib';

/** The two calls of an amqplib channel that settle a delivery. */
export type SettlingChannel = Pick<Channel, 'ack' | 'nack'>;

/**
 * Sends the acks of one channel made in one event-loop turn together: one `multiple` ack for the
 * highest tag below which every delivery is settled, each ack above a delivery still unsettled on
 * its own.
 *
 * @remarks
 * A `multiple` ack of tag T settles every delivery of the channel up to T that the server still
 * holds, so it is sent only when every tag up to T was acked (in this turn or before) or given back
 * (a nack, sent at once, which a later ack cannot undo). Every delivery of the channel must be
 * {@link AckCoalescer.delivered | filed} as it arrives, in order: RabbitMQ numbers them in the
 * order it sends them, so a tag not filed yet is above every tag filed. Each ack resolves once it
 * was written to the channel (true) or the channel failed first (false).
 */
export class AckCoalescer {
  readonly channel: SettlingChannel;
  /** Tags filed, in arrival order, from `#head` on; those settled are skipped lazily. */
  readonly #order: number[] = [];
  #head = 0;
  /** Tags of `#order` settled and not yet skipped. */
  readonly #settled = new Set<number>();
  /** Acks to send at the end of this turn. */
  #pending: Message[] = [];
  #flushed: Promise<boolean> | undefined;
  #resolveFlushed: ((sent: boolean) => void) | undefined;

  constructor(channel: SettlingChannel) {
    this.channel = channel;
  }

  /** Files a delivery as it arrives (unsettled). */
  delivered(message: Message): void {
    this.#order.push(message.fields.deliveryTag);
  }

  /** Acks `message` with the acks of this turn; resolves once written (true) or failed (false). */
  ack(message: Message): Promise<boolean> {
    this.#settled.add(message.fields.deliveryTag);
    this.#pending.push(message);
    if (this.#flushed === undefined) {
      this.#flushed = new Promise<boolean>((resolve) => {
        this.#resolveFlushed = resolve;
      });
      setImmediate(() => {
        this.flush();
      });
    }
    return this.#flushed;
  }

  /** Gives `message` back (nack) now; false when the channel failed. */
  nack(message: Message, requeue: boolean): boolean {
    this.#settled.add(message.fields.deliveryTag);
    try {
      this.channel.nack(message, false, requeue);
      return true;
    } catch {
      return false;
    }
  }

  /** Sends the acks of this turn now (before the channel closes). */
  flush(): void {
    const resolve = this.#resolveFlushed;
    const pending = this.#pending;
    this.#flushed = undefined;
    this.#resolveFlushed = undefined;
    this.#pending = [];
    if (pending.length === 0) {
      resolve?.(true);
      return;
    }
    const lowest = this.#lowestUnsettled();
    let highest: Message | undefined;
    const alone: Message[] = [];
    for (const message of pending) {
      const tag = message.fields.deliveryTag;
      if (tag < lowest) {
        if (highest === undefined || tag > highest.fields.deliveryTag) highest = message;
      } else {
        alone.push(message);
      }
    }
    let sent = true;
    try {
      if (highest !== undefined) this.channel.ack(highest, true);
      for (const message of alone) this.channel.ack(message, false);
    } catch {
      sent = false;
    }
    resolve?.(sent);
  }

  /** The lowest tag filed and not settled (Infinity when none). */
  #lowestUnsettled(): number {
    while (this.#head < this.#order.length) {
      const tag = this.#order[this.#head] as number;
      if (!this.#settled.delete(tag)) {
        if (this.#head >= 1024 && this.#head * 2 >= this.#order.length) {
          this.#order.splice(0, this.#head);
          this.#head = 0;
        }
        return tag;
      }
      this.#head++;
    }
    this.#order.length = 0;
    this.#head = 0;
    return Number.POSITIVE_INFINITY;
  }
}
