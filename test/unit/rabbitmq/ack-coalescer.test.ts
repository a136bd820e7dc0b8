import type { Message } from 'amqplib';
import { describe, expect, it } from 'vitest';
import { AckCoalescer, type SettlingChannel } from '../../../src/rabbitmq/ack-coalescer.js';

/** What a channel was asked to send, in order: `ack 5+` is a `multiple` ack of tag 5. */
function recordingChannel(): { channel: SettlingChannel; sent: string[]; failing: { now: boolean } } {
  const sent: string[] = [];
  const failing = { now: false };
  const channel: SettlingChannel = {
    ack: (message, allUpTo) => {
      if (failing.now) throw new Error('Channel closed');
      sent.push(`ack ${String(message.fields.deliveryTag)}${allUpTo === true ? '+' : ''}`);
    },
    nack: (message, allUpTo, requeue) => {
      if (failing.now) throw new Error('Channel closed');
      sent.push(
        `nack ${String(message.fields.deliveryTag)}${allUpTo === true ? '+' : ''}${requeue === false ? '' : ' requeue'}`,
      );
    },
  };
  return { channel, sent, failing };
}

function deliveries(coalescer: AckCoalescer, count: number): Message[] {
  const messages: Message[] = [];
  for (let tag = 1; tag <= count; tag++) {
    const message = { fields: { deliveryTag: tag } } as unknown as Message;
    coalescer.delivered(message);
    messages.push(message);
  }
  return messages;
}

describe('AckCoalescer', () => {
  describe('.ack', () => {
    it('sends the acks of one turn as one multiple ack when every tag below is settled', async () => {
      const { channel, sent } = recordingChannel();
      const coalescer = new AckCoalescer(channel);
      const [m1, m2, m3] = deliveries(coalescer, 4) as [Message, Message, Message];
      const acked = [coalescer.ack(m2), coalescer.ack(m1), coalescer.ack(m3)];
      expect(sent).toEqual([]);
      await expect(Promise.all(acked)).resolves.toEqual([true, true, true]);
      expect(sent).toEqual(['ack 3+']);
    });

    it('acks each tag above an unsettled one on its own, never the unsettled one', async () => {
      const { channel, sent } = recordingChannel();
      const coalescer = new AckCoalescer(channel);
      const [m1, m2, m3, m4] = deliveries(coalescer, 4) as [Message, Message, Message, Message];
      await Promise.all([coalescer.ack(m1), coalescer.ack(m3), coalescer.ack(m4)]);
      expect(sent).toEqual(['ack 1+', 'ack 3', 'ack 4']);
      await coalescer.ack(m2);
      expect(sent).toEqual(['ack 1+', 'ack 3', 'ack 4', 'ack 2+']);
    });

    it('covers a tag given back before with a later multiple ack only after its nack was sent', async () => {
      const { channel, sent } = recordingChannel();
      const coalescer = new AckCoalescer(channel);
      const [m1, m2, m3] = deliveries(coalescer, 3) as [Message, Message, Message];
      expect(coalescer.nack(m2, true)).toBe(true);
      await Promise.all([coalescer.ack(m1), coalescer.ack(m3)]);
      expect(sent).toEqual(['nack 2 requeue', 'ack 3+']);
    });

    it('never covers a delivery filed after the acks (still in flight when they were made)', async () => {
      const { channel, sent } = recordingChannel();
      const coalescer = new AckCoalescer(channel);
      const [m1, m2] = deliveries(coalescer, 2) as [Message, Message];
      const acked = coalescer.ack(m2);
      const m3 = { fields: { deliveryTag: 3 } } as unknown as Message;
      coalescer.delivered(m3);
      void coalescer.ack(m1);
      await acked;
      expect(sent).toEqual(['ack 2+']);
      await coalescer.ack(m3);
      expect(sent).toEqual(['ack 2+', 'ack 3+']);
    });

    it('resolves false when the channel fails before the acks are written', async () => {
      const { channel, failing } = recordingChannel();
      const coalescer = new AckCoalescer(channel);
      const [m1] = deliveries(coalescer, 1) as [Message];
      const acked = coalescer.ack(m1);
      failing.now = true;
      await expect(acked).resolves.toBe(false);
    });
  });

  describe('.flush', () => {
    it('sends the acks of this turn at once', () => {
      const { channel, sent } = recordingChannel();
      const coalescer = new AckCoalescer(channel);
      const [m1, m2] = deliveries(coalescer, 2) as [Message, Message];
      void coalescer.ack(m1);
      void coalescer.ack(m2);
      coalescer.flush();
      expect(sent).toEqual(['ack 2+']);
    });
  });
});
