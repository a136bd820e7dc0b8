import type { LogFields, Logger } from './logger.js';

/** `logger`, its calls made safe: a logger that throws is ignored, as a throwing hook is. */
export function loggingNeverThrows(logger: Logger): Logger {
  const call =
    (level: keyof Logger) =>
    (message: string, fields?: LogFields): void => {
      try {
        logger[level](message, fields);
      } catch {
        // Nothing to report it to.
      }
    };
  return { debug: call('debug'), info: call('info'), warn: call('warn'), error: call('error') };
}
