/**
 * Service identifiers Harrier binds in inversify containers.
 *
 * @example
 * ```ts
 * @injectable()
 * class AuditLog {
 *   constructor(@inject(HarrierTokens.MessageContext) private readonly ctx: MessageContext) {}
 * }
 * ```
 */
export const HarrierTokens = {
  /** The handled message's {@link MessageContext}, bound in each message's child container. */
  MessageContext: Symbol.for('harrier/MessageContext'),
  /** The handled message's envelope, bound in each message's child container. */
  Envelope: Symbol.for('harrier/Envelope'),
  /** The {@link MessageBus}, bound in the root container by `createBus`. */
  MessageBus: Symbol.for('harrier/MessageBus'),
} as const;
