${prelude}RUN python /opt/envkit/build_flash_attn.py --sdist /opt/envkit/sources/${sdist} \
        --targets ${targets} --arch-list "${arch_list}" --host-march ${host_march}${profile} \
        --out /opt/envkit/wheels --install
