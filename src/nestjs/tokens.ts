/** The Nest token of the {@link HarrierModuleOptions} the module was configured with. */
export const HARRIER_MODULE_OPTIONS = Symbol.for('harrier/nestjs/ModuleOptions');
