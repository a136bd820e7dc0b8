import {
  Inject,
  Injectable,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import type { MessageBus } from '../bus/message-bus.js';
import { HarrierTokens } from '../bus/tokens.js';

/**
 * Starts the bus when the Nest application has bootstrapped, and stops it, draining in-flight
 * handlers, when it shuts down.
 *
 * @remarks
 * Start in `onApplicationBootstrap`: every provider exists and every `onModuleInit` has run, so a
 * handler never meets a half-made dependency. Stop in `beforeApplicationShutdown` (on `app.close()`,
 * or a signal with `app.enableShutdownHooks()`): `bus.stop()` stops taking messages, lets in-flight
 * handlers finish within `gracePeriodMs`, releases the rest for redelivery and closes the broker,
 * before Nest closes the HTTP server and runs the `onApplicationShutdown` hooks, where Nest
 * integrations close their connections, so those are still open while handlers finish.
 */
@Injectable()
export class BusLifecycle implements OnApplicationBootstrap, BeforeApplicationShutdown {
  constructor(@Inject(HarrierTokens.MessageBus) private readonly bus: MessageBus) {}

  onApplicationBootstrap(): Promise<void> {
    return this.bus.start();
  }

  beforeApplicationShutdown(): Promise<void> {
    return this.bus.stop();
  }
}
