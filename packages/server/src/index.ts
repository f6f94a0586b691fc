export type * from "./config/model-config.js";
