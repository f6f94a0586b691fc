/** The statistics extension through tritonclient (statistics.py). */
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite('conformance: statistics (tritonclient)', 'statistics/statistics.py', () => [simpleModel(), simpleStringModel()], [
  'counts_follow_traffic',
  'every_field_perf_analyzer_reads',
  'http_and_grpc_agree',
  'all_models',
  'aio_statistics',
  'unknown_model_statistics',
]);
