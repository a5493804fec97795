module example.com/idem-payments

go 1.19

require github.com/lib/pq v1.10.7
