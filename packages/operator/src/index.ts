/** @nereid/operator: the Kubernetes controller for NereidServer and NereidModel resources. */
export const API_GROUP = 'nereid.dev';
export const API_VERSION = 'v1alpha1';
