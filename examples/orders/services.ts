/**
 * The services the handlers depend on, with simulated implementations so the example runs
 * anywhere. Handlers receive them through inversify with explicit tokens.
 */
import type { PayloadOf } from '../../src/index.js';
import type { ReserveStock } from './messages.js';

/** Service identifiers of the orders example's interfaces. */
export const OrdersTokens = {
  PaymentGateway: Symbol.for('orders/PaymentGateway'),
  LegacyCrm: Symbol.for('orders/LegacyCrm'),
  /** The fulfilment saga's payment delay in milliseconds (a number). */
  PaymentDueMs: Symbol.for('orders/PaymentDueMs'),
} as const;

/** Charges customers. */
export interface PaymentGateway {
  /** Charges an order; resolves to the payment id. */
  charge(orderId: string, amountCents: number): Promise<string>;
}

/** The old CRM that still wants to hear about every order. */
export interface LegacyCrm {
  notifyOrderPlaced(orderId: string, customer: string): Promise<void>;
}

/** Options of {@link SimulatedPaymentGateway}. */
export interface SimulatedPaymentGatewayOptions {
  /**
   * How many times each order id times out before its charge goes through.
   * @defaultValue `{}` (no timeouts)
   */
  readonly timeouts?: Readonly<Record<string, number>>;
}

/** A payment gateway that times out a configured number of times per order, then succeeds. */
export class SimulatedPaymentGateway implements PaymentGateway {
  readonly #timeoutsLeft: Map<string, number>;
  #next = 1;

  constructor(options: SimulatedPaymentGatewayOptions = {}) {
    this.#timeoutsLeft = new Map(Object.entries(options.timeouts ?? {}));
  }

  async charge(orderId: string, _amountCents: number): Promise<string> {
    const left = this.#timeoutsLeft.get(orderId) ?? 0;
    if (left > 0) {
      this.#timeoutsLeft.set(orderId, left - 1);
      throw new Error('Payment gateway timed out after 30 s');
    }
    return `pay-${String(this.#next++).padStart(4, '0')}`;
  }
}

/** A legacy CRM that is either available or down. */
export class SimulatedLegacyCrm implements LegacyCrm {
  /** Flip to true to bring the CRM back. */
  available: boolean;
  readonly notified: string[] = [];

  constructor(options: { readonly available: boolean }) {
    this.available = options.available;
  }

  async notifyOrderPlaced(orderId: string, _customer: string): Promise<void> {
    if (!this.available) throw new Error('Legacy CRM answered 503 Service Unavailable');
    this.notified.push(orderId);
  }
}

/** Options of {@link Inventory}. */
export interface InventoryOptions {
  /**
   * How many times the warehouse system is busy for each order id before its reservation goes
   * through.
   * @defaultValue `{}` (never busy)
   */
  readonly busy?: Readonly<Record<string, number>>;
}

/** Stock levels, reserved per order. A singleton: one warehouse per process. */
export class Inventory {
  #next = 1;
  readonly #reservations = new Map<string, string>();
  readonly #busyLeft: Map<string, number>;

  constructor(options: InventoryOptions = {}) {
    this.#busyLeft = new Map(Object.entries(options.busy ?? {}));
  }

  /** Reserves an order's lines; reserving the same order twice returns the first reservation. */
  reserve(orderId: string, _lines: PayloadOf<typeof ReserveStock>['lines']): string {
    const busy = this.#busyLeft.get(orderId) ?? 0;
    if (busy > 0) {
      this.#busyLeft.set(orderId, busy - 1);
      throw new Error('Warehouse system busy');
    }
    // At-least-once delivery means the same command may arrive twice: reserve idempotently.
    const existing = this.#reservations.get(orderId);
    if (existing !== undefined) return existing;
    const reservationId = `res-${String(this.#next++).padStart(4, '0')}`;
    this.#reservations.set(orderId, reservationId);
    return reservationId;
  }

  /**
   * Lets go of an order's reservation, because it shipped or was cancelled; true when this process
   * held it (each process of the Redis example has a warehouse of its own). Idempotent.
   */
  release(orderId: string): boolean {
    return this.#reservations.delete(orderId);
  }
}
