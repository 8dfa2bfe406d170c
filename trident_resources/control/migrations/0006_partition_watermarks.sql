-- Delta per partition (issue 10): a partitioned output consumes its sources partition by
-- partition, so its watermark is kept per output partition. `partition_key` names one partition
-- of the output (e.g. `day(l_shipdate)=19724`, the same names as the partition writer locks);
-- '' is the whole output (every unpartitioned delta node, and all rows written before this
-- migration). Materializing one partition then neither reads nor advances another's watermark.
ALTER TABLE trident_watermarks ADD COLUMN IF NOT EXISTS partition_key text NOT NULL DEFAULT '';
ALTER TABLE trident_watermarks DROP CONSTRAINT IF EXISTS trident_watermarks_pkey;
ALTER TABLE trident_watermarks ADD CONSTRAINT trident_watermarks_pkey
    PRIMARY KEY (output_dataset_id, source_dataset_id, partition_key);
