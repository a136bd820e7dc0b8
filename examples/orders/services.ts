/**
 * The services the handlers depend on, with simulated implementations so the example runs
 * anywhere. Handlers receive them through inversify with explicit tokens.
 */
import { injectable } from 'inversify';
import type { PayloadOf } from '../../src/index.js';
import type { ReserveStock } from './messages.js';

/** Service identifiers of the orders example's interfaces. */
export const OrdersTokens = {
  PaymentGateway: Symbol.for('orders/PaymentGateway'),
  LegacyCrm: Symbol.for('orders/LegacyCrm'),
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

/** Stock levels, reserved per order. A singleton: one warehouse per process. */
@injectable()
export class Inventory {
  #next = 1;
  readonly #reservations = new Map<string, string>();

  /** Reserves an order's lines; reserving the same order twice returns the first reservation. */
  reserve(orderId: string, _lines: PayloadOf<typeof ReserveStock>['lines']): string {
    // At-least-once delivery means the same command may arrive twice: reserve idempotently.
    const existing = this.#reservations.get(orderId);
    if (existing !== undefined) return existing;
    const reservationId = `res-${String(this.#next++).padStart(4, '0')}`;
    this.#reservations.set(orderId, reservationId);
    return reservationId;
  }
}
