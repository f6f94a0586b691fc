export * from './datatypes.js';
export * from './errors.js';
