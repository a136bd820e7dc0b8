import { HarrierError } from '../errors/harrier-error.js';

/**
 * The error a broker rejects a command with when no endpoint has registered a handler for its type
 * (code `no-route`); the message names the fix.
 *
 * @remarks
 * Exported so that other `MessageBroker` implementations refuse an unrouted command exactly as
 * the built-in brokers do.
 */
export function noRouteError(type: string): HarrierError {
  const name = type.split('.').pop() ?? type;
  return new HarrierError(
    'no-route',
    `No endpoint handles command "${type}": decorate a class with @CommandHandler(${name}), list it in the handlers of the bus that should run it, and start that bus (start() registers the route) before sending; if that handler starts later (a deploy order), create the sending bus with requireCommandRoute: false and the command waits in its queue`,
  );
}
