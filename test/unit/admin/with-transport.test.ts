import { describe, expect, it } from 'vitest';
import type { SystemAdmin } from '../../../src/admin/system-admin.js';
import type { Topology } from '../../../src/admin/topology.js';
import type { AdminBrokerOptions, TransportAdmin } from '../../../src/admin/transport-admin.js';
import { withTransport } from '../../../src/admin/with-transport.js';
import { InMemoryBroker } from '../../../src/broker/in-memory-broker.js';
import { InMemoryDeliveryLedger } from '../../../src/broker/in-memory-delivery-ledger.js';
import { InMemoryDeadLetterStore } from '../../../src/dead-letters/in-memory-dead-letter-store.js';
import { InMemoryCheckpointStore } from '../../../src/log/in-memory-checkpoint-store.js';
import { InMemorySagaStore } from '../../../src/sagas/in-memory-saga-store.js';
import { InMemoryScheduleStore } from '../../../src/schedules/in-memory-schedule-store.js';

/** A system whose stores are in memory, its own topology saying where it is, recording what closes. */
function storesAdmin(closed: string[]): SystemAdmin {
  const deadLetters = new InMemoryDeadLetterStore();
  return {
    deadLetterStore: () => deadLetters,
    checkpointStore: () => new InMemoryCheckpointStore(),
    sagaStore: () => new InMemorySagaStore(),
    scheduleStore: () => new InMemoryScheduleStore(),
    projectionLags: () => Promise.resolve([]),
    eventLogNote: 'no log here',
    topology: () => Promise.resolve({ endpoints: [], note: 'the stores’ own topology' }),
    broker: () => Promise.reject(new Error('the stores have no broker')),
    close: () => {
      closed.push('stores');
      return Promise.resolve();
    },
  };
}

const transportTopology: Topology = {
  endpoints: [{ endpoint: 'billing', subscriptions: [] }],
  note: 'from RabbitMQ',
};

/** A transport admin, counting how often it was opened. */
function transport(
  closed: string[],
  opened: { count: number },
  failFirst = false,
): () => Promise<TransportAdmin> {
  return () => {
    opened.count += 1;
    if (failFirst && opened.count === 1) return Promise.reject(new Error('RabbitMQ down'));
    return Promise.resolve({
      topology: () => Promise.resolve(transportTopology),
      broker: () => Promise.resolve(new InMemoryBroker()),
      close: () => {
        closed.push('transport');
        return Promise.resolve();
      },
    });
  };
}

describe('withTransport', () => {
  it('takes the stores from the stores’ admin and the topology and broker from the transport', async () => {
    const closed: string[] = [];
    const stores = storesAdmin(closed);
    const admin = withTransport(stores, transport(closed, { count: 0 }));
    expect(admin.deadLetterStore()).toBe(stores.deadLetterStore());
    expect(admin.eventLogNote).toBe('no log here');
    expect(await admin.topology()).toBe(transportTopology);
    expect(await admin.broker()).toBeInstanceOf(InMemoryBroker);
    expect('outboxAdmin' in admin).toBe(false);
  });

  describe('when only stores are used', () => {
    it('never opens the transport, and closing closes the stores alone', async () => {
      const closed: string[] = [];
      const opened = { count: 0 };
      const admin = withTransport(storesAdmin(closed), transport(closed, opened));
      await admin.deadLetterStore().count();
      await admin.close();
      expect(opened.count).toBe(0);
      expect(closed).toEqual(['stores']);
    });
  });

  describe('when the transport is used', () => {
    it('opens it once, and closing closes the transport then the stores, once', async () => {
      const closed: string[] = [];
      const opened = { count: 0 };
      const admin = withTransport(storesAdmin(closed), transport(closed, opened));
      await Promise.all([admin.topology(), admin.topology(), admin.broker()]);
      await admin.close();
      await admin.close();
      expect(opened.count).toBe(1);
      expect(closed).toEqual(['transport', 'stores']);
    });
  });

  describe('when opening the transport fails', () => {
    it('rejects that call and opens it again on the next', async () => {
      const closed: string[] = [];
      const opened = { count: 0 };
      const admin = withTransport(storesAdmin(closed), transport(closed, opened, true));
      await expect(admin.topology()).rejects.toThrow('RabbitMQ down');
      expect(await admin.topology()).toBe(transportTopology);
      expect(opened.count).toBe(2);
      await admin.close();
      expect(closed).toEqual(['transport', 'stores']);
    });
  });

  describe('when the stores keep a delivery ledger', () => {
    /** A transport admin recording the options each `broker` call got. */
    function recording(calls: AdminBrokerOptions[]): () => Promise<TransportAdmin> {
      return () =>
        Promise.resolve({
          topology: () => Promise.resolve(transportTopology),
          broker: (options = {}) => {
            calls.push(options);
            return Promise.resolve(new InMemoryBroker());
          },
          close: () => Promise.resolve(),
        });
    }

    it('gives the transport’s broker the stores’ ledger, made once, with the caller’s options', async () => {
      const made: InMemoryDeliveryLedger[] = [];
      const stores: SystemAdmin = {
        ...storesAdmin([]),
        deliveryLedger: () => {
          const ledger = new InMemoryDeliveryLedger();
          made.push(ledger);
          return ledger;
        },
      };
      const calls: AdminBrokerOptions[] = [];
      const admin = withTransport(stores, recording(calls));
      await admin.broker({ logger: console });
      await admin.broker();
      expect(made).toHaveLength(1);
      expect(calls).toEqual([{ logger: console, ledger: made[0] }, { ledger: made[0] }]);
      await admin.close();
    });

    it('gives none with the option ledger false (a system whose brokers run without one)', async () => {
      let made = 0;
      const stores: SystemAdmin = {
        ...storesAdmin([]),
        deliveryLedger: () => {
          made += 1;
          return new InMemoryDeliveryLedger();
        },
      };
      const calls: AdminBrokerOptions[] = [];
      const admin = withTransport(stores, recording(calls), { ledger: false });
      await admin.broker();
      expect(made).toBe(0);
      expect(calls).toEqual([{}]);
      await admin.close();
    });
  });
});
