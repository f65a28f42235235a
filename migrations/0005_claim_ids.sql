-- Why: result schema 1.2 numbers claims k1, k2, ... (response order). Claims used to be c1, c2, ...,
-- which read like the default chunk ids c0, c1, ... on every screen that shows both. Each stored claim
-- takes the id of its position, and every reference to it follows: faithfulness judgments, their
-- grounding links, completeness answers/supports/extras and the review ids. `claims` is renamed last
-- because the other statements look the old ids up in it. schema_version is left as written: it says
-- which fields the evaluation produced; veralith.models reads any 1.0/1.1 row as 1.2.

UPDATE faithfulness_judgments SET claim_id = (
    SELECT 'k' || (c.position + 1) FROM claims c
    WHERE c.trace_id = faithfulness_judgments.trace_id AND c.claim_id = faithfulness_judgments.claim_id)
WHERE EXISTS (SELECT 1 FROM claims c
              WHERE c.trace_id = faithfulness_judgments.trace_id AND c.claim_id = faithfulness_judgments.claim_id);

UPDATE grounding SET claim_id = (
    SELECT 'k' || (c.position + 1) FROM claims c
    WHERE c.trace_id = grounding.trace_id AND c.claim_id = grounding.claim_id)
WHERE EXISTS (SELECT 1 FROM claims c WHERE c.trace_id = grounding.trace_id AND c.claim_id = grounding.claim_id);

UPDATE completeness_mappings SET claim_id = (
    SELECT 'k' || (c.position + 1) FROM claims c
    WHERE c.trace_id = completeness_mappings.trace_id AND c.claim_id = completeness_mappings.claim_id)
WHERE EXISTS (SELECT 1 FROM claims c
              WHERE c.trace_id = completeness_mappings.trace_id AND c.claim_id = completeness_mappings.claim_id);

UPDATE completeness_extras SET claim_id = (
    SELECT 'k' || (c.position + 1) FROM claims c
    WHERE c.trace_id = completeness_extras.trace_id AND c.claim_id = completeness_extras.claim_id)
WHERE EXISTS (SELECT 1 FROM claims c
              WHERE c.trace_id = completeness_extras.trace_id AND c.claim_id = completeness_extras.claim_id);

-- {sub_question_id: [claim_id, ...]}: rebuilt key by key, ids not found among the claims kept as they are.
UPDATE completeness SET supports = (
    SELECT json_group_object(s.key, json((
        SELECT json_group_array(COALESCE(
            (SELECT 'k' || (c.position + 1) FROM claims c
             WHERE c.trace_id = completeness.trace_id AND c.claim_id = v.value), v.value))
        FROM json_each(s.value) v)))
    FROM json_each(completeness.supports) s)
WHERE supports != '{}';

-- [id, ...]: claim ids and sub-question ids mixed; only claim ids change.
UPDATE traces SET review_ids = (
    SELECT json_group_array(COALESCE(
        (SELECT 'k' || (c.position + 1) FROM claims c WHERE c.trace_id = traces.id AND c.claim_id = v.value),
        v.value))
    FROM json_each(traces.review_ids) v)
WHERE review_ids IS NOT NULL AND review_ids != '[]';

UPDATE claims SET claim_id = 'k' || (position + 1);
