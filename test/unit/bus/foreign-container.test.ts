import 'reflect-metadata';
import { Container } from 'inversify';
import { describe, expect, it } from 'vitest';
import packageJson from '../../../package.json' with { type: 'json' };
const SUPPORTED_INVERSIFY = '^8.2.3';
import { HarrierError, createBus } from '../../../src/index.js';
import { createContainerInvoker } from '../../../src/extend.js';

/**
 * Stands in for a Container of another inversify copy: it has the methods, but not the private
 * fields of the Container class Harrier loaded. A real second copy is installed by
 * test/e2e/packed-install.test.ts.
 */
class ForeignContainer {
  readonly bindings = new Map<unknown, unknown>();
  isBound(id: unknown): boolean {
    return this.bindings.has(id);
  }
  bind(id: unknown): { toConstantValue: (value: unknown) => void } {
    return { toConstantValue: (value) => this.bindings.set(id, value) };
  }
  get(id: unknown): unknown {
    return this.bindings.get(id);
  }
}

function errorOf(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('createBus', () => {
  describe('when the container is not a Container of the inversify Harrier loaded', () => {
    it('throws foreign-container naming the inversify range to install', () => {
      const error = errorOf(() => createBus({ container: new ForeignContainer() as unknown as Container }));
      expect(HarrierError.is(error)).toBe(true);
      expect(error).toMatchObject({ code: 'foreign-container' });
      const message = (error as Error).message;
      expect(message).toContain('createBus (a ForeignContainer)');
      expect(message).toContain(`npm install inversify@${SUPPORTED_INVERSIFY}`);
    });
  });

  describe('when the container is not an object', () => {
    it('throws foreign-container saying what it got', () => {
      const error = errorOf(() => createBus({ container: null as unknown as Container }));
      expect(error).toMatchObject({ code: 'foreign-container' });
      expect((error as Error).message).toContain('createBus (null)');
    });
  });

  describe('when the container is an inversify Container', () => {
    it('uses it', () => {
      const container = new Container();
      expect(createBus({ container }).container).toBe(container);
    });
  });
});

describe('createContainerInvoker', () => {
  describe('when the container is not a Container of the inversify Harrier loaded', () => {
    it('throws foreign-container naming the inversify range to install', () => {
      const error = errorOf(() => createContainerInvoker(new ForeignContainer() as unknown as Container));
      expect(error).toMatchObject({ code: 'foreign-container' });
      expect((error as Error).message).toContain(`npm install inversify@${SUPPORTED_INVERSIFY}`);
    });
  });
});

describe('SUPPORTED_INVERSIFY', () => {
  it('is the inversify range of the peer dependencies', () => {
    expect(SUPPORTED_INVERSIFY).toBe(packageJson.peerDependencies.inversify);
  });
});
