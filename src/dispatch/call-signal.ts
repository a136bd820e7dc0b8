/**
 * The abort signal of one handler call whose caller's signal is shared by many calls (`execute`'s
 * bus-wide stop signal, a projection lane's): made on first read, it aborts when the shared one does
 * and when the call times out, without aborting the shared one.
 *
 * @remarks
 * Made by the caller per call, or on the first read of the context's `signal`: most handlers never
 * read it, and an AbortController per call is measurable on a busy worker. It listens to the shared
 * signal only between the first read and {@link CallSignal.endCall}, so calls that are over leave no
 * listener on a signal that lives as long as the bus (`AbortSignal.any` would, on Node 20).
 */
export class CallSignal {
  readonly #parent: AbortSignal | (() => AbortSignal);
  #controller: AbortController | undefined = undefined;
  /** The shared signal while this one listens to it. */
  #listening: AbortSignal | undefined = undefined;
  #reason: unknown = undefined;
  #ended = false;

  /** @param parent - the shared signal, or a function that gives it when first read. */
  constructor(parent: AbortSignal | (() => AbortSignal)) {
    this.#parent = parent;
  }

  /** The call's signal, made on first read. */
  get signal(): AbortSignal {
    if (this.#controller !== undefined) return this.#controller.signal;
    const controller = new AbortController();
    this.#controller = controller;
    if (this.#reason !== undefined) {
      controller.abort(this.#reason);
      return controller.signal;
    }
    const parent = typeof this.#parent === 'function' ? this.#parent() : this.#parent;
    if (parent.aborted) controller.abort(parent.reason);
    else if (!this.#ended) {
      this.#listening = parent;
      parent.addEventListener('abort', this.#parentAborted, { once: true });
    }
    return controller.signal;
  }

  /** The call's signal as a function (what a `PipelineInput` or a context takes). */
  readonly read = (): AbortSignal => this.signal;

  /** Aborts the call's signal with `reason` (its time-out), now or when it is first read. */
  timedOut(reason: unknown): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    this.endCall();
    this.#controller?.abort(reason);
  }

  /** The call is over: stop listening to the shared signal. */
  endCall(): void {
    this.#ended = true;
    const listening = this.#listening;
    if (listening === undefined) return;
    this.#listening = undefined;
    listening.removeEventListener('abort', this.#parentAborted);
  }

  readonly #parentAborted = (): void => {
    const parent = this.#listening;
    this.#listening = undefined;
    this.#controller?.abort(parent?.reason);
  };
}
