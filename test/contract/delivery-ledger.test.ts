import { InMemoryDeliveryLedger } from '../../src/broker/in-memory-delivery-ledger.js';
import { describeDeliveryLedgerConformance } from '../../src/testing/delivery-ledger-conformance.js';

describeDeliveryLedgerConformance('InMemoryDeliveryLedger', (options) =>
  Promise.resolve({ ledger: new InMemoryDeliveryLedger(options) }),
);
